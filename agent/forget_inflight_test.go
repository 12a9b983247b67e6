package agent

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// heldStore is a real store whose next Lookup, once hold was called,
// signals held and waits for release: a lookup in flight for as long as
// the test needs.
type heldStore struct {
	meta.Store
	mu            sync.Mutex
	held, release chan struct{}
}

func (s *heldStore) hold(held, release chan struct{}) {
	s.mu.Lock()
	s.held, s.release = held, release
	s.mu.Unlock()
}

func (s *heldStore) Lookup(ctx context.Context, name string) (meta.Metadata, error) {
	s.mu.Lock()
	held, release := s.held, s.release
	s.held, s.release = nil, nil
	s.mu.Unlock()
	if held != nil {
		held <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return meta.Metadata{}, ctx.Err()
		}
	}
	return s.Store.Lookup(ctx, name)
}

// cached reports whether a caches a peer of the name.
func cached(a *Agent, name string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.peers[name] != nil
}

// heldPeer plays peer "m" (incarnation 7) on l for one connection: it
// takes the hello, signals held and waits until release is closed, then
// answers (with its record too, for a Connect) and waits for the agent
// to hang up. The channel gets nil once it did, or the first error
// (ctx ended first: the connection was kept).
func heldPeer(t *testing.T, ctx context.Context, l *engine.Listener, record bool, held chan<- struct{}, release <-chan struct{}) <-chan error {
	msgs := [][]byte{encodeHello("m", 7, 0, 1, false)}
	if record {
		msgs = append(msgs, encodeMeta(mustEncode(t, "m", 7))...)
	}
	done := make(chan error, 1)
	go func() {
		ep, err := l.Accept(ctx)
		if err != nil {
			done <- err
			return
		}
		defer ep.Close()
		if _, err := ep.Recv(ctx); err != nil { // the hello
			done <- err
			return
		}
		held <- struct{}{}
		<-release
		for _, m := range msgs {
			if err := ep.Send(ctx, m); err != nil {
				done <- err
				return
			}
		}
		_, err = ep.Recv(ctx) // until a hangs up
		if ctx.Err() != nil {
			err = fmt.Errorf("the agent kept the connection: %w", ctx.Err())
		} else {
			err = nil
		}
		done <- err
	}()
	return done
}

// TestForgetDuringInsert: a Connect, Peer lookup, Notify or Write of a
// name in flight when Forget of it runs, that would cache the peer only
// after Forget returned, fails with ErrForgotten (and engine.ErrPeer), its
// connection closed, and leaves nothing cached: no peer, no address, no
// store watch, no new lookup. Before, it cached the peer again (a Notify
// or Write, whose dial found the peer forgotten, looked the name up again
// in the store), though the application had said forget it. A Peer that
// starts after Forget returned is a new lookup, and caches the peer.
func TestForgetDuringInsert(t *testing.T) {
	type call func(ctx context.Context, a *Agent, addr string, local engine.Slice) error
	tests := []struct {
		name string
		// store: a finds m in the store (else by Connect); op is the
		// call in flight across Forget, held at hold.
		store bool
		hold  string // "dial": m's answer to the hello; "lookup": the store's Lookup
		op    call
	}{
		{"Connect", false, "dial", func(ctx context.Context, a *Agent, addr string, _ engine.Slice) error {
			_, err := a.Connect(ctx, addr)
			return err
		}},
		{"Peer", true, "lookup", func(ctx context.Context, a *Agent, _ string, _ engine.Slice) error {
			_, err := a.Peer(ctx, "m")
			return err
		}},
		{"Write", true, "lookup", func(ctx context.Context, a *Agent, _ string, local engine.Slice) error {
			return a.Write(ctx, "m", []Desc{{Local: local, Section: "s"}}).Wait(ctx)
		}},
		{"Notify dialing", true, "dial", func(ctx context.Context, a *Agent, _ string, _ engine.Slice) error {
			return a.Notify(ctx, "m", []byte("n"))
		}},
		{"Write dialing", true, "dial", func(ctx context.Context, a *Agent, _ string, local engine.Slice) error {
			return a.Write(ctx, "m", []Desc{{Local: local, Section: "s"}}).Wait(ctx)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			ea, em := newEngine(t), newEngine(t)
			l, err := em.Listen("unix", sockDir(t)+"/m.sock")
			require.NoError(t, err)
			defer l.Close()
			hs := &heldStore{}
			var opts agentOpts
			if tt.store {
				srv := etcdtest.New(t)
				hs.Store = openStore(t, srv.Endpoints())
				opts.store = hs
				rbuf := alloc(t, em, 4096, engine.Host)
				key, err := rbuf.Export()
				require.NoError(t, err)
				ms := openStore(t, srv.Endpoints())
				defer ms.Close()
				require.NoError(t, ms.Publish(ctx, meta.Metadata{Name: "m", Incarnation: 7, Version: 1, Unix: l.Addr(),
					Sections: []meta.Section{{Name: "s", Len: 4096, Location: engine.Host.String(), Key: key.Bytes()}}}))
			}
			a := newAgent(t, ea, "a", opts)
			local := alloc(t, ea, 4096, engine.Host).All()
			if !tt.store { // m cached by an earlier Connect
				first := scriptedPeer(ctx, l, append([][]byte{encodeHello("m", 7, 0, 1, false)}, encodeMeta(mustEncode(t, "m", 7))...), nil)
				_, err := a.Connect(ctx, l.Addr())
				require.NoError(t, err)
				defer func() { require.NoError(t, <-first) }()
			} else if tt.hold == "dial" { // m cached from the store, not dialed yet
				_, err := a.Peer(ctx, "m")
				require.NoError(t, err)
			}
			held, release := make(chan struct{}), make(chan struct{})
			var peerDone <-chan error
			if tt.hold == "dial" {
				peerDone = heldPeer(t, ctx, l, !tt.store, held, release)
			} else {
				hs.hold(held, release)
			}
			lookups := a.Stats().StoreLookups
			result := make(chan error, 1)
			go func() { result <- tt.op(ctx, a, l.Addr(), local) }()
			<-held
			ferr := a.Forget("m")
			close(release)
			err = <-result
			require.ErrorIs(t, err, ErrForgotten)
			require.ErrorIs(t, err, engine.ErrPeer)
			require.False(t, cached(a, "m"), "the peer forgotten came back")
			require.Empty(t, watching(a), "its watch came back")
			n, order := a.addrsKept()
			require.Zero(t, n+order, "its address came back")
			if tt.hold == "lookup" {
				lookups++
			}
			require.Equal(t, lookups, a.Stats().StoreLookups, "looked up again")
			require.NoError(t, ferr, "a peer cached, or a lookup of it in flight, is forgotten")
			if peerDone != nil {
				require.NoError(t, <-peerDone)
			}
			if tt.store { // a lookup that starts after Forget is a new one
				_, err = a.Peer(ctx, "m")
				require.NoError(t, err)
				require.True(t, cached(a, "m"))
			}
		})
	}
}
