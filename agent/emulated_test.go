package agent

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// TestSectionEmulated: a section on an emulated Gaudi is published as
// emulated, and a peer reading the record (over the side channel) sees
// it so; a host section is not.
func TestSectionEmulated(t *testing.T) {
	ctx := testCtx(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{})
	b := newAgent(t, eb, "b", agentOpts{unix: true})
	require.NoError(t, b.Publish("dev", alloc(t, eb, 8192, engine.Gaudi(0)).All()))
	require.NoError(t, b.Publish("host", alloc(t, eb, 8192, engine.Host).All()))
	_, err := a.Connect(ctx, b.Metadata().Unix)
	require.NoError(t, err)
	p, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	for _, tc := range []struct {
		section, loc string
		emulated     bool
	}{{"dev", "gaudi0", true}, {"host", "host", false}} {
		s, err := p.Section(tc.section)
		require.NoError(t, err)
		require.Equal(t, tc.loc, s.Location)
		require.Equal(t, tc.emulated, s.Emulated, tc.section)
	}
}
