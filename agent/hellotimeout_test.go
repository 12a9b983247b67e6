package agent

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// mutePeer plays a peer that accepts connections on l (its engine
// completes the engine's handshake) but never answers the agent's hello:
// it holds each connection until the dialer hangs up or ctx ends. The
// channel gets nil once l is closed, or the first other error.
func mutePeer(ctx context.Context, l *engine.Listener) <-chan error {
	done := make(chan error, 1)
	go func() {
		for {
			ep, err := l.Accept(ctx)
			if err != nil {
				if ctx.Err() == nil {
					err = nil // l closed
				}
				done <- err
				return
			}
			for { // the hello, then until the dialer hangs up
				if _, err := ep.Recv(ctx); err != nil {
					break
				}
			}
			ep.Close()
		}
	}()
	return done
}

// TestHelloTimeout: a peer whose engine accepts a connection but whose
// agent never answers the hello (hung, or hostile) fails Connect and the
// first use of a peer found in the store with ErrTimeout after
// Config.HelloTimeout, though the caller's ctx has no deadline. Before,
// they waited until the caller's ctx ended: for ever with
// context.Background().
func TestHelloTimeout(t *testing.T) {
	tests := []struct {
		name    string
		network string
		store   bool // found in the store, dialed on first use (else Connect)
	}{
		{"connect unix", "unix", false},
		{"connect tcp", "tcp", false},
		{"first use unix", "unix", true},
		{"first use tcp", "tcp", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tctx := testCtx(t)
			ea, em := newEngine(t), newEngine(t)
			addr := sockDir(t) + "/m.sock"
			if tt.network == "tcp" {
				addr = "127.0.0.1:0"
			}
			l, err := em.Listen(tt.network, addr)
			require.NoError(t, err)
			mctx, stopMute := context.WithCancel(tctx)
			muteDone := mutePeer(mctx, l)
			defer func() {
				require.NoError(t, l.Close())
				require.NoError(t, <-muteDone)
				stopMute()
			}()
			cfg := Config{Name: "a", Engine: ea, HelloTimeout: 200 * time.Millisecond}
			if tt.store {
				srv := etcdtest.New(t)
				cfg.Store = openStore(t, srv.Endpoints())
				md := meta.Metadata{Name: "m", Incarnation: 7, Version: 1}
				if tt.network == "unix" {
					md.Unix = l.Addr()
				} else {
					md.TCP = l.Addr()
				}
				ms := openStore(t, srv.Endpoints())
				defer ms.Close()
				require.NoError(t, ms.Publish(tctx, md))
			}
			a, err := New(tctx, cfg)
			require.NoError(t, err)
			defer func() { require.NoError(t, a.Close()) }()

			// The caller's ctx has no deadline; the guard only bounds
			// the test (without the bound, the call waits for it).
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			guard := time.AfterFunc(20*time.Second, cancel)
			defer guard.Stop()
			if tt.store {
				var p *Peer
				p, err = a.Peer(ctx, "m")
				require.NoError(t, err)
				_, err = p.Endpoint(ctx)
				require.ErrorIs(t, err, engine.ErrTimeout)
				require.ErrorIs(t, p.Err(), engine.ErrTimeout, "a peer that does not answer is dropped")
			} else {
				_, err = a.Connect(ctx, l.Addr())
				require.ErrorIs(t, err, engine.ErrTimeout)
			}
			require.NoError(t, ctx.Err(), "the call waited for the caller's ctx")
			require.Contains(t, err.Error(), "HelloTimeout")
		})
	}
}
