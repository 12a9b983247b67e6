package synapse

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// On this machine there is no Habana runtime: Lookup must say so, with a
// typed error and the reason, for every way it can be missing.
func TestLookupNotFound(t *testing.T) {
	for _, tc := range []struct {
		name, lib, reason string
	}{
		{"runtime absent", "", "libSynapse.so is not loaded"},
		{"library not loaded", "libdoesnotexist-gxfer.so", "not loaded in this process"},
		// libc is loaded in every process (cgo build) but has no Synapse
		// symbol; without cgo it is not loaded, which is also "not found".
		{"no symbol or not loaded", "libc.so.6", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Lookup(Options{Library: tc.lib})
			require.Error(t, err)
			require.ErrorIs(t, err, ErrNotFound)
			var se *Error
			require.True(t, errors.As(err, &se))
			require.Contains(t, se.Reason, tc.reason)
		})
	}
}

func TestParseChecksTheFD(t *testing.T) {
	f, err := os.Open("/dev/null")
	require.NoError(t, err)
	defer f.Close()
	for _, tc := range []struct {
		name string
		fd   int32
	}{
		{"negative", -1},
		{"not open", 1 << 20},
		{"not a habanalabs node", int32(f.Fd())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, infoBufSize)
			binary.LittleEndian.PutUint32(b[offFD:], uint32(tc.fd))
			_, err := parse("x", b)
			require.ErrorIs(t, err, ErrLayout)
		})
	}
}

func TestCheckNodeRegexp(t *testing.T) {
	for p, ok := range map[string]bool{
		"/dev/accel/accel0": true, "/dev/hl3": true, "/dev/accel/accel_controlD0": false,
		"/dev/hl_controlD0": false, "/dev/null": false,
	} {
		require.Equal(t, ok, nodeRE.MatchString(p), p)
	}
}

// The struct comes from a foreign library whose layout may differ: parse
// must never panic, and accepts only an fd naming a habanalabs node.
func FuzzParse(f *testing.F) {
	f.Add(make([]byte, infoBufSize))
	b := make([]byte, infoBufSize)
	binary.LittleEndian.PutUint32(b[offFD:], 0)
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		buf := make([]byte, infoBufSize)
		copy(buf, data)
		info, err := parse("fuzz", buf)
		if err == nil {
			require.Regexp(t, nodeRE, info.Node)
		} else {
			require.ErrorIs(t, err, ErrLayout)
		}
	})
}
