package lent_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/hlsys"
	"github.com/gxfer/gxfer/internal/lent"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestTarget(t *testing.T) {
	d, err := hlsim.New(hlsim.Config{})
	require.NoError(t, err)
	defer d.Close()
	sb, err := d.Open()
	require.NoError(t, err)
	defer sb.Close()
	b, ok := sb.(hlsys.Backend)
	require.True(t, ok, "the emulator's backend is an ioctl backend")

	for _, tc := range []struct {
		name   string
		t      lent.Target
		zero   bool
		fd     int
		source string
		str    string
	}{
		{name: "zero", t: lent.Target{}, zero: true, fd: -1, str: "(no target)"},
		{name: "fd", t: lent.New(b, 7, "fd"), fd: 7, source: "fd", str: b.Name() + " lent by fd"},
		{name: "emulated", t: lent.New(b, -1, "hlsim runtime"), fd: -1, source: "hlsim runtime", str: b.Name() + " lent by hlsim runtime"},
		{name: "fd without backend", t: lent.New(nil, 7, "fd"), zero: true, fd: -1, source: "fd", str: "(no target)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.zero, tc.t.IsZero())
			require.Equal(t, tc.fd, lent.FD(tc.t))
			require.Equal(t, tc.source, lent.Source(tc.t))
			require.Equal(t, tc.str, tc.t.String())
			if tc.zero {
				require.Nil(t, lent.Backend(tc.t))
			} else {
				require.Same(t, b, lent.Backend(tc.t))
			}
		})
	}
}
