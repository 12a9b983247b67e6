package agent

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// TestNoSectionIsNotFound: every error matching ErrNoSection also matches
// meta.ErrNotFound, as ErrNoSection's doc says, and a transfer naming no
// section is counted as NotFound: before, only Peer.Section's did; a
// descriptor's (Write, Read, Prepare) and Withdraw's did not (and such a
// transfer was counted in Errors.Other).
func TestNoSectionIsNotFound(t *testing.T) {
	ctx := testCtx(t)
	a, b, p, src := peerWithSection(t, 8192)
	d := []Desc{{Local: src.Slice(0, 4096), Section: "x"}}
	tests := []struct {
		name     string
		call     func() error
		notFound uint64 // Errors.NotFound counted
	}{
		{"Peer.Section", func() error { _, err := p.Section("x"); return err }, 0},
		{"Agent.Write", func() error { return a.Write(ctx, "b", d).Wait(ctx) }, 1},
		{"Agent.Read", func() error { return a.Read(ctx, "b", d).Wait(ctx) }, 1},
		{"Peer.Write", func() error { return p.Write(ctx, d).Wait(ctx) }, 1},
		{"Peer.Prepare", func() error {
			_, err := p.Prepare(ctx, []engine.Slice{src.Slice(0, 4096)}, []RemoteDesc{{Section: "x"}})
			return err
		}, 0},
		{"Agent.Withdraw", func() error { return b.Withdraw("x") }, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := a.Stats().Errors
			err := tt.call()
			require.ErrorIs(t, err, ErrNoSection)
			require.ErrorIs(t, err, meta.ErrNotFound)
			after := a.Stats().Errors
			require.Equal(t, before.NotFound+tt.notFound, after.NotFound)
			require.Equal(t, before.Other, after.Other)
		})
	}
}
