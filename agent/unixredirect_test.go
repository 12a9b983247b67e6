package agent

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// TestRecordUnixPathOfAnotherAgent: a hostile peer "h", reached over TCP,
// whose record names the unix socket of another agent of this node ("v",
// reachable over unix only) with v's incarnation (as the store shows it to
// every agent) and v's sections, does not get a's connection to "h" made
// to v: the agent answering at a record's address must answer with the
// record's name too. Before, a connected to v as "h", and a's Write to
// "h" landed in v's memory.
func TestRecordUnixPathOfAnotherAgent(t *testing.T) {
	tests := []struct {
		name  string
		store bool // h's record is in the store (else Connect fetches it from h)
	}{
		{"connect", false},
		{"store", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			ea, ev, eh := newEngine(t), newEngine(t), newEngine(t)
			v := newAgent(t, ev, "v", agentOpts{unix: true})
			vbuf := alloc(t, ev, 4096, engine.Host)
			require.NoError(t, v.Publish("s", vbuf.All()))
			vmd := v.Metadata()

			lh, err := eh.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer lh.Close()
			hmd := meta.Metadata{Name: "h", Incarnation: vmd.Incarnation, Version: vmd.Version + 1000,
				Unix: vmd.Unix, TCP: lh.Addr(), Sections: vmd.Sections}
			hello := encodeHello("h", hmd.Incarnation, 0, hmd.Version, false)
			msgs := [][]byte{hello}
			var store meta.Store
			if tt.store {
				srv := etcdtest.New(t)
				store = openStore(t, srv.Endpoints())
				hs := openStore(t, srv.Endpoints())
				defer hs.Close()
				require.NoError(t, hs.Publish(ctx, hmd))
			} else {
				rec, err := hmd.Encode()
				require.NoError(t, err)
				msgs = append(msgs, encodeMeta(rec)...)
			}
			hDone := scriptedPeer(ctx, lh, msgs, nil)
			a := newAgent(t, ea, "a", agentOpts{store: store})
			if !tt.store {
				_, err = a.Connect(ctx, lh.Addr())
				require.NoError(t, err)
			}
			p, err := a.Peer(ctx, "h")
			require.NoError(t, err)
			src := alloc(t, ea, 4096, engine.Host)
			copy(src.Bytes(), pattern(4096, 9))
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second) // h's engine has no such section
			defer cancel()
			_ = a.Write(wctx, "h", []Desc{{Local: src.All(), Section: "s"}}).Wait(wctx)
			require.False(t, bytes.Equal(src.Bytes(), vbuf.Bytes()), "a's Write to h landed in v's memory")
			tr, ok := p.Transport()
			require.True(t, !ok || tr == engine.TransportTCP, "a reached h over v's socket")
			require.NoError(t, a.Close())
			require.NoError(t, <-hDone)
		})
	}
}

// TestConnectOnNodeRecordFromSocket: Connect reaches a peer over TCP whose
// record names an agent of this node ("v": its name, incarnation and
// unix socket, as anyone v serves its record to sees them) but lists v's
// sections under other names. The connection Connect keeps is v's socket,
// so the record cached must be the one v serves there, not the one the
// TCP address served. Before, a cached the TCP one, and a's Write to v's
// section "scratch" landed in v's "weights".
func TestConnectOnNodeRecordFromSocket(t *testing.T) {
	ctx := testCtx(t)
	ea, ev, eh := newEngine(t), newEngine(t), newEngine(t)
	v := newAgent(t, ev, "v", agentOpts{unix: true})
	weights, scratch := alloc(t, ev, 4096, engine.Host), alloc(t, ev, 4096, engine.Host)
	require.NoError(t, v.Publish("weights", weights.All()))
	require.NoError(t, v.Publish("scratch", scratch.All()))
	vmd := v.Metadata()
	w, ok := vmd.Section("weights")
	require.True(t, ok)
	swapped := meta.Metadata{Name: "v", Incarnation: vmd.Incarnation, Version: vmd.Version,
		Unix: vmd.Unix, Sections: []meta.Section{w}}
	swapped.Sections[0].Name = "scratch"

	lh, err := eh.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer lh.Close()
	rec, err := swapped.Encode()
	require.NoError(t, err)
	msgs := append([][]byte{encodeHello("v", vmd.Incarnation, 0, vmd.Version, false)}, encodeMeta(rec)...)
	hDone := scriptedPeer(ctx, lh, msgs, nil)
	a := newAgent(t, ea, "a", agentOpts{})
	name, err := a.Connect(ctx, lh.Addr())
	require.NoError(t, err)
	require.Equal(t, "v", name)
	p, err := a.Peer(ctx, "v")
	require.NoError(t, err)
	src := alloc(t, ea, 4096, engine.Host)
	copy(src.Bytes(), pattern(4096, 10))
	err = a.Write(ctx, "v", []Desc{{Local: src.All(), Section: "scratch"}}).Wait(ctx)
	require.False(t, bytes.Equal(src.Bytes(), weights.Bytes()), "a's Write to v's scratch landed in v's weights")
	require.NoError(t, err)
	require.True(t, bytes.Equal(src.Bytes(), scratch.Bytes()))
	require.Equal(t, vmd, p.Metadata())
	require.NoError(t, a.Close())
	require.NoError(t, <-hDone)
}
