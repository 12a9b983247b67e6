package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"small", []string{"-size", "1MiB", "-threads", "2", "-time", "5ms"}, 0, "limit: "},
		{"bad-size", []string{"-size", "1"}, 2, "need -size"},
		{"bad-threads", []string{"-threads", "0"}, 2, "need -size"},
		{"bad-flag", []string{"-x"}, 2, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errw bytes.Buffer
			require.Equal(t, tc.code, run(tc.args, &out, &errw))
			require.Contains(t, out.String()+errw.String(), tc.want)
		})
	}
}
