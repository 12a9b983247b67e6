package soak

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testPeerStderr, set in a peer's environment, is a line TestMain's peer
// role writes to its stderr before it starts, as the race detector
// writes its report while the process goes on.
const testPeerStderr = "GXFER_SOAK_TEST_PEER_STDERR"

// TestKilledPeerDataRaceReported: a race-built peer that hits a data race
// prints the report to stderr and goes on; only its exit status (66 at
// exit) said so, and a peer the soak SIGKILLs (the peer-kill fault) never
// reaches exit: the report was lost and the run passed. Every peer here
// reports a race at start and is killed (only peer-kill is injected); the
// run must fail naming it.
func TestKilledPeerDataRaceReported(t *testing.T) {
	rep, err := Run(context.Background(), Config{
		Faults:     []Fault{FaultPeerKill},
		Duration:   3 * time.Second,
		Seed:       7,
		Procs:      1,
		Workers:    1,
		MaxOp:      4 << 10,
		FaultEvery: 100 * time.Millisecond,
		Netns:      "off",
		PeerCommand: func() *exec.Cmd {
			c := testPeerCommand()
			c.Env = append(os.Environ(), testPeerStderr+"=WARNING: DATA RACE (a test's stand-in)")
			return c
		},
	})
	require.NoError(t, err)
	require.NotZero(t, rep.Injected[FaultPeerKill], "the run killed no peer")
	var races []string
	for _, v := range rep.Violations {
		if strings.Contains(v, "DATA RACE") {
			races = append(races, v)
		}
	}
	require.NotEmpty(t, races, "violations: %q", rep.Violations)
	require.False(t, rep.OK())
}

// TestTailBufferSeesRaceMarker: the report is seen however the pipe cut
// it into writes, and after later output pushed it out of the tail.
func TestTailBufferSeesRaceMarker(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		want   bool
	}{
		{"none", []string{"panic: nothing of the kind\n"}, false},
		{"one write", []string{"==================\nWARNING: DATA RACE\nWrite at"}, true},
		{"split", []string{"====\nWARNING: DA", "TA RACE\nWrite at"}, true},
		{"split in three", []string{"WARN", "ING: DATA R", "ACE"}, true},
		{"pushed out", []string{"WARNING: DATA RACE\n", strings.Repeat("x", 64)}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tb := &tailBuffer{max: 32}
			for _, w := range tc.writes {
				n, err := tb.Write([]byte(w))
				require.NoError(t, err)
				require.Equal(t, len(w), n)
			}
			require.Equal(t, tc.want, tb.raced())
		})
	}
}
