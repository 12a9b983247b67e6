package main

import (
	"bytes"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/testutil"
)

// TestMain runs the peer of -engine when re-executed as it.
func TestMain(m *testing.M) {
	if path := os.Getenv(peerEnv); path != "" {
		os.Exit(runPeer(path, os.Getenv(peerSizeEnv), os.Stdout))
	}
	testutil.Main(m)
}

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
		{"bad-reps", []string{"-engine", "-reps", "0"}, 2, "need -size"},
		{"engine", []string{"-engine", "-size", "1MiB", "-threads", "2", "-slices", "2", "-reps", "2"}, 0, "BenchmarkHostCopyVsLimit/size=1MiB\t2\t"},
		{"bad-flag", []string{"-x"}, 2, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errw bytes.Buffer
			require.Equal(t, tc.code, run(tc.args, &out, &errw))
			require.Contains(t, out.String()+errw.String(), tc.want)
		})
	}
}
