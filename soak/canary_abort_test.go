package soak

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// TestCanaryCheckSurvivesCSAbort: a peer's "check" of a Gaudi canary
// whose read-back copy hit the cs-abort fault (armed on its device for
// the next command submission) reads it again and answers OK. It
// answered "ERR ... command submission aborted", which the driver
// reported as a 'stale-canary' violation: a fault the soak injected
// itself, not a changed canary (seen in gxfer soak -seed 303 -faults all).
func TestCanaryCheckSurvivesCSAbort(t *testing.T) {
	p, err := startPeerSide(peerSpec{Seed: 1, Unix: filepath.Join(t.TempDir(), "p.sock"), TCP: "127.0.0.1:0", Slots: 1}, zerolog.Nop())
	require.NoError(t, err)
	defer p.close()
	a := p.command([]string{"salloc", "gaudi"})
	require.True(t, strings.HasPrefix(a, "KEY "), a)
	require.Equal(t, "FREED", p.command([]string{"sfree", "7"}))
	p.mu.Lock()
	require.NotNil(t, p.canary)
	require.True(t, p.canary.Location().IsGaudi())
	dev := p.canary.Location().Device()
	p.mu.Unlock()
	require.Equal(t, "OK", p.command([]string{"fault", "abort", strconv.Itoa(dev)}))
	require.Equal(t, "OK", p.command([]string{"check"}))
}
