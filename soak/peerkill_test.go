package soak

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// closeHook is a peer's stdin whose Close runs fn first.
type closeHook struct{ fn func() }

func (closeHook) Write(b []byte) (int, error) { return len(b), nil }
func (h closeHook) Close() error              { h.fn(); return nil }

// runningUnkilled reports whether process pid runs with no SIGKILL
// pending: not gone, not a zombie, SIGKILL in neither its thread's nor
// its shared pending set (/proc/<pid>/status).
func runningUnkilled(t *testing.T, pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false // gone (reaped)
	}
	const sigkill = uint64(1) << (9 - 1)
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return false
			}
		case "SigPnd", "ShdPnd":
			m, err := strconv.ParseUint(v, 16, 64)
			require.NoError(t, err, line)
			if m&sigkill != 0 {
				return false
			}
		}
	}
	return true
}

// TestPeerKillSignalsBeforeStdinEOF: the peer-kill fault SIGKILLs the
// peer before it closes the peer's stdin. It closed stdin first, and a
// peer that read the EOF before the signal landed began its orderly exit
// (EOF on stdin: close everything), freeing its exported buffers under
// the load's operations: they failed with ErrInvalid ("stale key:
// allocation 1 was freed by its owner"), which no fault explains, and
// the soak reported a violation for a SIGKILL (seen in gxfer soak -seed
// 202 -faults peer-kill,close-load,hostile,timeout, 1 to 3 per 3 min).
func TestPeerKillSignalsBeforeStdinEOF(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	pid := cmd.Process.Pid
	var unkilledAtEOF bool
	p := &peerProc{pid: pid, exited: exited, stdin: closeHook{func() { unkilledAtEOF = runningUnkilled(t, pid) }}}
	p.kill()
	require.False(t, unkilledAtEOF, "the peer's stdin was closed while it ran with no SIGKILL sent")
}
