// Command peerlimits shows how a listener bounds its peers and why
// Config.PeerIdleEvict keeps a full listener open to newcomers.
//
// A server engine listens on 127.0.0.1 with room for two endpoints
// (MaxPeers and MaxPeersPerSource 4: a TCP endpoint is TCPLanes
// connections, 2 by default, and each counts) and exports a host buffer.
// Two clients dial it and each Puts into the buffer once; then one of them
// goes quiet while the other keeps putting. A third client dials:
//
//   - with PeerIdleEvict (here 100 ms; 60 s by default), the server closes
//     the endpoint that has been idle longer than that and lets the
//     newcomer in; the busy client is never closed, and the quiet one's
//     next Put fails with ErrPeer;
//   - with PeerIdleEvict negative (never evict), the two endpoints keep
//     their slots for ever and the newcomer's Dial fails with
//     ErrTooManyPeers.
//
// Everything runs in this process, over loopback TCP, host memory only.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gxfer/gxfer/engine"
)

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "peerlimits:", err)
		os.Exit(1)
	}
}

// idleEvict is the server's PeerIdleEvict in the first scenario.
const idleEvict = 100 * time.Millisecond

// run plays both scenarios.
func run(out io.Writer) error {
	if err := scenario(out, idleEvict); err != nil {
		return fmt.Errorf("PeerIdleEvict %v: %w", idleEvict, err)
	}
	if err := scenario(out, -1); err != nil {
		return fmt.Errorf("PeerIdleEvict never: %w", err)
	}
	return nil
}

// client is one dialing engine and its endpoint to the server.
type client struct {
	eng *engine.Engine
	ep  *engine.Endpoint
	src *engine.Buffer
}

func dial(ctx context.Context, addr string) (*client, error) {
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	if err != nil {
		return nil, err
	}
	src, err := eng.Alloc(4096, engine.Host)
	if err != nil {
		eng.Close()
		return nil, err
	}
	ep, err := eng.Dial(ctx, "tcp", addr)
	if err != nil {
		eng.Close()
		return nil, err
	}
	return &client{eng: eng, ep: ep, src: src}, nil
}

func (c *client) put(ctx context.Context, key engine.RemoteKey) error {
	return c.ep.PutSync(ctx, c.src.All(), key)
}

func (c *client) close() { c.eng.Close() }

// scenario runs one server with the given PeerIdleEvict, two clients that
// fill it (one quiet, one busy), and a newcomer.
func scenario(out io.Writer, evict time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := engine.New(engine.Config{
		Devices:           engine.DevicesNone,
		MaxPeers:          4, // two endpoints of two connections
		MaxPeersPerSource: 4,
		PeerIdleEvict:     evict,
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	ln, err := srv.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	buf, err := srv.Alloc(4096, engine.Host)
	if err != nil {
		return err
	}
	key, err := buf.Export()
	if err != nil {
		return err
	}
	if evict > 0 {
		fmt.Fprintf(out, "server: room for 2 endpoints, PeerIdleEvict %v\n", evict)
	} else {
		fmt.Fprintln(out, "server: room for 2 endpoints, PeerIdleEvict never")
	}

	// Each Puts before the next dials: an endpoint that never made a
	// request is the first a full listener closes.
	var cs [2]*client
	for i := range cs {
		if cs[i], err = dial(ctx, ln.Addr()); err != nil {
			return err
		}
		defer cs[i].close()
		if err := cs[i].put(ctx, key); err != nil {
			return err
		}
	}
	quiet, busy := cs[0], cs[1]
	fmt.Fprintln(out, "quiet and busy: connected, one Put each")

	// The busy client keeps putting while the quiet one sits idle for
	// longer than PeerIdleEvict (the listener notes idleness each quarter
	// of it, so an endpoint counts as idle after at most 1.25 times it).
	stop := make(chan struct{})
	busyErr := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				busyErr <- nil
				return
			case <-time.After(5 * time.Millisecond):
			}
			if err := busy.put(ctx, key); err != nil {
				busyErr <- err
				return
			}
		}
	}()
	wait := 3 * idleEvict
	time.Sleep(wait)

	newcomer, err := dialRetry(ctx, ln.Addr(), evict > 0, wait)
	close(stop)
	if bErr := <-busyErr; bErr != nil {
		if newcomer != nil {
			newcomer.close()
		}
		return fmt.Errorf("the busy client's Put failed: %w", bErr)
	}
	if evict < 0 {
		if !errors.Is(err, engine.ErrTooManyPeers) {
			if newcomer != nil {
				newcomer.close()
			}
			return fmt.Errorf("the newcomer's Dial ended with %v, not ErrTooManyPeers", err)
		}
		fmt.Fprintln(out, "newcomer: refused (ErrTooManyPeers): the two endpoints keep their slots")
		return nil
	}
	if err != nil {
		return fmt.Errorf("the newcomer was not let in: %w", err)
	}
	defer newcomer.close()
	if err := newcomer.put(ctx, key); err != nil {
		return err
	}
	fmt.Fprintln(out, "newcomer: let in, its Put landed")
	if err := busy.put(ctx, key); err != nil {
		return fmt.Errorf("the busy client was closed: %w", err)
	}
	fmt.Fprintln(out, "busy: still connected, its Put landed")
	switch err := quiet.put(ctx, key); {
	case errors.Is(err, engine.ErrPeer):
		fmt.Fprintln(out, "quiet: closed to make room, its next Put failed with ErrPeer")
	case err == nil:
		return errors.New("the quiet client's endpoint was not closed")
	default:
		return fmt.Errorf("the quiet client's Put ended with %v, not ErrPeer", err)
	}
	return nil
}

// dialRetry dials until it gets in or until ErrTooManyPeers has been
// answered for longer than patience (a listener on a loaded machine may
// note the quiet endpoint's idleness a little late); any other error ends
// it at once. With retry false it dials once.
func dialRetry(ctx context.Context, addr string, retry bool, patience time.Duration) (*client, error) {
	deadline := time.Now().Add(patience)
	for {
		c, err := dial(ctx, addr)
		if err == nil || !retry || !errors.Is(err, engine.ErrTooManyPeers) || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(patience / 10)
	}
}
