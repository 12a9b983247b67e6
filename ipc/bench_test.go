package ipc

import (
	"context"
	"fmt"
	"testing"

	"github.com/gxfer/gxfer/wire"
)

// BenchmarkRoundTrip measures one request/response of a small frame
// between two goroutines over a Listen/Dial connection: raw frames on
// ipc.Conn, and decoded messages through wire.Conn.
func BenchmarkRoundTrip(b *testing.B) {
	b.Run("layer=ipc", func(b *testing.B) {
		s, c := pair(b, Config{})
		go func() {
			buf := make([]byte, 64)
			for {
				n, _, err := s.Recv(buf)
				if err != nil {
					return
				}
				if s.Send(buf[:n], nil) != nil {
					return
				}
			}
		}()
		frame := make([]byte, 32)
		buf := make([]byte, 64)
		b.ReportAllocs()
		for b.Loop() {
			if err := c.Send(frame, nil); err != nil {
				b.Fatal(err)
			}
			if _, _, err := c.Recv(buf); err != nil {
				b.Fatal(err)
			}
		}
		_ = c.Close()
	})
	b.Run("layer=wire", func(b *testing.B) {
		s, c := pair(b, Config{})
		server, client := wire.NewConn(s, wire.ConnConfig{}), wire.NewConn(c, wire.ConnConfig{})
		ctx := context.Background()
		go func() {
			var req wire.Completion
			for {
				f, err := server.Recv(ctx)
				if err != nil || f.Decode(&req) != nil {
					return
				}
				if server.Send(&req) != nil {
					return
				}
			}
		}()
		req := &wire.Completion{RequestID: 1}
		var resp wire.Completion
		b.ReportAllocs()
		for b.Loop() {
			req.RequestID++
			if err := client.Send(req); err != nil {
				b.Fatal(err)
			}
			f, err := client.Recv(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := f.Decode(&resp); err != nil || resp.RequestID != req.RequestID {
				b.Fatal(err, resp)
			}
		}
		_ = client.Close()
	})
}

// BenchmarkHandleCacheHit is the cost of a Get+Put of a cached import.
func BenchmarkHandleCacheHit(b *testing.B) {
	c := NewHandleCache(CacheConfig[int]{})
	defer c.Close()
	imp := func(Key) (int, uint64, error) { return 1, 4096, nil }
	k := Key{Peer: PeerID{PID: 1, PIDNS: 2}, AllocID: 3, Generation: 4}
	h, err := c.Get(k, imp)
	if err != nil {
		b.Fatal(err)
	}
	c.Put(h)
	b.Run("goroutines=1", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			h, err := c.Get(k, imp)
			if err != nil {
				b.Fatal(err)
			}
			c.Put(h)
		}
	})
	b.Run("goroutines=parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				h, err := c.Get(k, imp)
				if err != nil {
					b.Error(err)
					return
				}
				c.Put(h)
			}
		})
	})
}

// BenchmarkHandleCacheHitMany is a Get+Put hit among many cached imports
// (of two peers), cycling over them: the hit path's shards then hold
// several entries each.
func BenchmarkHandleCacheHitMany(b *testing.B) {
	for _, n := range []int{64, 1024} {
		b.Run(fmt.Sprintf("entries=%d", n), func(b *testing.B) {
			c := NewHandleCache(CacheConfig[int]{})
			defer c.Close()
			imp := func(Key) (int, uint64, error) { return 1, 4096, nil }
			keys := make([]Key, n)
			for i := range keys {
				keys[i] = Key{Peer: PeerID{PID: uint32(1 + i%2), PIDNS: 2}, AllocID: uint64(i), Generation: 1}
				h, err := c.Get(keys[i], imp)
				if err != nil {
					b.Fatal(err)
				}
				c.Put(h)
			}
			i := 0
			for b.Loop() {
				h, err := c.Get(keys[i], imp)
				if err != nil {
					b.Fatal(err)
				}
				c.Put(h)
				if i++; i == n {
					i = 0
				}
			}
		})
	}
}
