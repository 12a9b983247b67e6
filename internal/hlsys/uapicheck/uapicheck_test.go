package uapicheck

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/hlsys"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// drmGen returns the 6.12 header generation. It skips only when
// EnvNewHeader is unset (a local run); .ci/run always sets it, and a set
// but unusable directory fails.
func drmGen(t *testing.T) Gen {
	t.Helper()
	dir := os.Getenv(EnvNewHeader)
	if dir == "" {
		t.Skipf("%s is unset: the 6.12 DRM header (drm/habanalabs_accel.h) is NOT checked; .ci/run sets it: "+
			"%s=$(sh internal/hlsys/uapicheck/fetch-new-header.sh) go test ./internal/hlsys/...", EnvNewHeader, EnvNewHeader)
	}
	g, err := GenDRM(dir)
	require.NoError(t, err)
	return g
}

// gens is every generation available to this run (6.1 always).
func gens(t *testing.T) []Gen {
	out := []Gen{Gen61()}
	if os.Getenv(EnvNewHeader) != "" {
		out = append(out, drmGen(t))
	}
	return out
}

func checkGen(t *testing.T, g Gen) {
	facts, err := Check(g, DefaultSpec(g))
	require.NoError(t, err)
	require.Greater(t, len(facts), 300, "suspiciously few facts")
	for _, m := range Mismatches(facts) {
		t.Errorf("%s: %s", g.Name, m)
	}
	t.Logf("%s: %d facts checked", g.Name, len(facts))
}

// TestHeader61 checks hlsys against the kernel 6.1 header: legacy 'H'
// numbering, 256-byte hw_ip_info, {handle, mem_size} export.
func TestHeader61(t *testing.T) { checkGen(t, Gen61()) }

// TestHeaderDRM checks hlsys against the kernel 6.12 header: DRM accel
// numbering, 304-byte hw_ip_info, {addr, mem_size, offset} export.
func TestHeaderDRM(t *testing.T) { checkGen(t, drmGen(t)) }

// TestRequestNumbers pins the documented request numbers independently of
// any header.
func TestRequestNumbers(t *testing.T) {
	assert.Equal(t, uint64(0xC0184801), uint64(hlsys.LegacyInfo))
	assert.Equal(t, uint64(0xC0186440), uint64(hlsys.AccelInfo))
	assert.Equal(t, uint64(0xC0286444), uint64(hlsys.AccelMemory))
}

// TestDecode checks that request numbers decode to their numbering and the
// two numberings never collide.
func TestDecode(t *testing.T) {
	for _, n := range []hlsys.Numbering{hlsys.Legacy, hlsys.Accel} {
		for nr := 0; nr < 6; nr++ {
			gn, gnr, ok := hlsys.Decode(n.Request(nr))
			require.True(t, ok)
			require.Equal(t, n, gn)
			require.Equal(t, nr, gnr)
		}
	}
	_, _, ok := hlsys.Decode(0x1234)
	require.False(t, ok)
}
