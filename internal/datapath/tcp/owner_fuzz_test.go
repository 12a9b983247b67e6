package tcp

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// fuzzOwnerSize is the owner's host and device memory in FuzzOwnerStream.
const fuzzOwnerSize = 4 << 20

// ownerStream is what a requester sends the owner as bytes on its TCP
// connection: msgs, each followed by the data of its Put (if any).
func ownerStream(t testing.TB, msgs ...wire.Message) []byte {
	t.Helper()
	ca, cb := loopback(t)
	raw := wire.NewConn(wire.NewStreamTransport(ca), wire.ConnConfig{MaxFrame: MaxFrame})
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(cb)
		got <- b
	}()
	for _, m := range msgs {
		var err error
		switch m := m.(type) {
		case *wire.Put:
			b := make([]byte, m.Length)
			fillBytes(b, byte(m.RequestID))
			err = raw.SendWithData([]wire.Message{m}, m.RequestID, 0, b)
		case *wire.PutList:
			var n uint64
			for _, e := range m.Entries {
				n += e.Length
			}
			b := make([]byte, n)
			fillBytes(b, 3)
			err = raw.SendWithData([]wire.Message{m}, m.RequestID, 0, b)
		default:
			err = raw.Send(m)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	_ = raw.Close()
	b := <-got
	_ = cb.Close()
	return b
}

// FuzzOwnerStream feeds arbitrary bytes from a requester to an owner's
// TCP path (requests, data, cancels, lists, into host and device memory)
// and then hangs up. The owner never panics, fails the endpoint with a
// peer error, and once closed holds none of its memory (every Acquire
// released) with nothing it started left running.
func FuzzOwnerStream(f *testing.F) {
	req := func(id uint64, k wire.RemoteKey, n uint64) wire.Request {
		return wire.Request{RequestID: id, Key: k, Length: n, Local: wire.Local{Kind: wire.LocalInline}}
	}
	dev := viewKey(fuzzOwnerSize, 4096, 3*Chunk)
	dev.MemType, dev.Device = wire.MemGaudi, 0
	host := viewKey(fuzzOwnerSize, 100, 1<<16)
	// Requests in flight together use disjoint memory: concurrent ones
	// into the same bytes are the requester's race (undefined bytes, and
	// a report of the race detector on the owner's fake memory).
	devB, hostB := dev, host
	devB.Offset, devB.Len, hostB.Offset = 2*Chunk+4096, Chunk, 1<<20
	l := list(5, 100, 0, 300)
	gl := list(7, 200, 200)
	gl.Keys[0] = dev
	f.Add([]byte{})
	f.Add(ownerStream(f, &wire.Put{Request: req(1, host, 1000)}, &wire.Get{Request: req(3, hostB, 5000)}, &wire.Heartbeat{}))
	f.Add(ownerStream(f, &wire.Put{Request: req(1, dev, Chunk)}, &wire.Get{Request: req(3, devB, Chunk)}))
	f.Add(ownerStream(f, &wire.PutList{ListRequest: l}, &wire.GetList{ListRequest: gl}, &wire.Cancel{RequestID: 7, Sent: 100}))
	f.Add(ownerStream(f, &wire.Get{Request: req(9, dev, 1<<16)}, &wire.Cancel{RequestID: 9}, &wire.Bye{}))
	f.Add(ownerStream(f, &wire.Data{RequestID: 11, Offset: 5, Bytes: []byte("abc")}))
	f.Fuzz(func(t *testing.T, stream []byte) {
		ca, cb := loopback(t)
		owner := fakeEnd(t, ca, false, fuzzOwnerSize, listCaps)
		owner.env.dev = &devBuf{hostBuf{mem: make([]byte, fuzzOwnerSize)}}
		drained := make(chan struct{})
		go func() { // what the owner sends: replies and Get data
			defer close(drained)
			_, _ = io.Copy(io.Discard, cb)
		}()
		_, _ = cb.Write(stream) // the owner may hang up first
		_ = cb.(interface{ CloseWrite() error }).CloseWrite()
		select {
		case <-owner.Done():
		case <-time.After(safetyFuzz):
			_ = cb.Close()
			t.Fatal("the owner did not end its endpoint after the requester hung up")
		}
		if err := owner.Err(); !errors.Is(err, gxerr.Peer) {
			t.Fatalf("the endpoint failed with %v, want a peer error", err)
		}
		owner.close()
		_ = cb.Close()
		<-drained
		for _, b := range []*hostBuf{owner.env.mem, &owner.env.dev.hostBuf} {
			if a, r := b.acquires.Load(), b.releases.Load(); a != r {
				t.Fatalf("owner memory acquired %d times, released %d", a, r)
			}
		}
	})
}

// safetyFuzz bounds FuzzOwnerStream's wait for the owner (a net against
// a hang, not a performance assertion).
const safetyFuzz = 20 * time.Second
