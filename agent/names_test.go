package agent

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// TestNamesNoRecordCanHave: an agent or section name that no record can
// carry (meta's rules: UTF-8 without control characters) is refused with
// ErrInvalid by New and Publish. Before, New started an agent no peer
// would accept (its hello was refused as malformed), and Publish kept the
// section: from then on the record no longer encoded, so no peer could
// fetch it over the side channel (nor, with a store, publish it).
func TestNamesNoRecordCanHave(t *testing.T) {
	ctx := testCtx(t)
	bad := []struct{ name, s string }{
		{"control character", "x\x01y"},
		{"DEL", "x\x7f"},
		{"C1 control", "x\u0085"},
		{"not UTF-8", "x\xff"},
	}
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{})
	b := newAgent(t, eb, "b", agentOpts{unix: true})
	buf := alloc(t, eb, 4096, engine.Host)
	for _, tt := range bad {
		t.Run("agent/"+tt.name, func(t *testing.T) {
			x, err := New(ctx, Config{Name: tt.s, Engine: ea})
			require.ErrorIs(t, err, engine.ErrInvalid)
			require.Nil(t, x)
		})
		t.Run("section/"+tt.name, func(t *testing.T) {
			v := b.Metadata().Version
			require.ErrorIs(t, b.Publish(tt.s, buf.All()), engine.ErrInvalid)
			require.Equal(t, v, b.Metadata().Version)
			require.Empty(t, b.Metadata().Sections)
		})
	}
	// b's record is as before: a fetches it.
	name, err := a.Connect(ctx, b.Metadata().Unix)
	require.NoError(t, err)
	require.Equal(t, "b", name)
	require.NoError(t, b.Publish("ok", buf.All()))
}
