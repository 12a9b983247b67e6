package engine

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// roundRobin is a TCP address that forwards its first connection to
// first and every later one to rest: a service name whose connections
// are spread over several engines (DNS round robin, a load balancer), or
// a port another engine took over. It accepts at most max connections.
func roundRobin(t *testing.T, first, rest string, max int) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	track := func(c net.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range max {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			to := rest
			if i == 0 {
				to = first
			}
			u, err := net.Dial("tcp", to)
			if err != nil {
				_ = c.Close()
				continue
			}
			track(c)
			track(u)
			wg.Add(2)
			pipe := func(dst, src net.Conn) {
				defer wg.Done()
				// Plain reads and writes: TCP to TCP, io.Copy splices
				// through pipes the runtime keeps (the fd leak check
				// sees them).
				_, _ = io.Copy(struct{ io.Writer }{dst}, struct{ io.Reader }{src})
				_ = dst.Close()
				_ = src.Close()
			}
			go pipe(c, u)
			go pipe(u, c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// TestLaneOfAnotherEngineRefused: a lane (an extra TCP connection a Dial
// opens to the address it dialed) that reaches another engine than the
// endpoint's is not used: the endpoint works on its other connections.
// Before, the lane was taken whatever engine answered, and the part of a
// large Put sent over it went to that engine, which does not own the key:
// the Put failed (and the endpoint with it).
func TestLaneOfAnotherEngineRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a hang guard only
	defer cancel()
	cfg := Config{Devices: DevicesNone, Transport: TransportTCP, TCPLanes: 2}
	owner, other, dialer := newEngine(t, cfg), newEngine(t, cfg), newEngine(t, cfg)
	lo, err := owner.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lo.Close()
	lx, err := other.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lx.Close()
	addr := roundRobin(t, lo.Addr(), lx.Addr(), 8)

	const size = 16 << 20 // split over the lanes
	dst, err := owner.Alloc(size, Host)
	require.NoError(t, err)
	k, err := dst.Export()
	require.NoError(t, err)
	src, err := dialer.Alloc(size, Host)
	require.NoError(t, err)
	for i := range src.Bytes() {
		src.Bytes()[i] = byte(i * 7)
	}
	ep, err := dialer.Dial(ctx, "tcp", addr)
	require.NoError(t, err)
	defer ep.Close()
	require.Equal(t, 1, ep.Stats().Lanes, "the lane to another engine is not used")
	require.NoError(t, ep.PutSync(ctx, src.All(), k))
	require.True(t, bytes.Equal(src.Bytes(), dst.Bytes()))
}
