package hlsim

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// killChildEnv selects TestKillChild's role in a re-executed test binary.
const killChildEnv = "GXFER_HLSIM_KILL_CHILD"

// TestKillsProcess (R6, R4) runs TestKillChild in child processes with the
// default Config.Kill: a process that hung a CS without an eventfd dies by
// SIGKILL (the driver's device_kill_open_processes); one that registered
// an eventfd and released the device within the release watchdog lives.
func TestKillsProcess(t *testing.T) {
	for _, tc := range []struct {
		role   string
		killed bool
	}{
		{"hang", true},
		{"release", false},
	} {
		t.Run(tc.role, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestKillChild$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), killChildEnv+"="+tc.role)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			if !tc.killed {
				require.NoError(t, err, "%s", out.String())
				require.Contains(t, out.String(), "child: released, alive")
				return
			}
			var ee *exec.ExitError
			require.True(t, errors.As(err, &ee), "%v\n%s", err, out.String())
			ws := ee.Sys().(syscall.WaitStatus)
			require.True(t, ws.Signaled(), "%v\n%s", err, out.String())
			require.Equal(t, syscall.SIGKILL, ws.Signal())
			require.Contains(t, out.String(), "child: CS timed out")
			require.NotContains(t, out.String(), "child: still alive")
		})
	}
}

// TestKillChild is TestKillsProcess's child; it does nothing in a normal
// run.
func TestKillChild(t *testing.T) {
	role := os.Getenv(killChildEnv)
	if role == "" {
		t.Skip("run by TestKillsProcess")
	}
	d, err := New(Config{CSTimeout: 50 * time.Millisecond, ReleaseWatchdog: 300 * time.Millisecond})
	require.NoError(t, err)
	defer d.Close()
	b, err := d.open()
	require.NoError(t, err)
	defer b.Close()
	cb := hostMem(t, 4096)
	copy(cb, nop())
	va, err := hlsys.MemMapHost(b, unsafe.Pointer(&cb[0]), 4096, 0, 0)
	require.NoError(t, err)
	chunk := hlsys.CSChunk{CBHandle: va, CBSize: 8, Flags: hlsys.CSChunkFlagsUserAllocCB}
	var efd int
	if role == "release" {
		efd, err = unix.Eventfd(0, unix.EFD_CLOEXEC)
		require.NoError(t, err)
		defer unix.Close(efd)
		require.NoError(t, hlsys.RegisterEventFD(b, efd))
	}
	d.HangNextCS(1)
	out, err := hlsys.SubmitCS(b, nil, []hlsys.CSChunk{chunk}, 0, 0)
	require.NoError(t, err)
	switch role {
	case "hang":
		// The TDR resets at once: the waiter sees the rollback, then the
		// process is killed a second later.
		_, err = hlsys.WaitForCS(b, out.Seq, uint64(safety.Microseconds()))
		require.ErrorIs(t, err, unix.ETIMEDOUT)
		fmt.Println("child: CS timed out")
		time.Sleep(5 * time.Second)
		fmt.Println("child: still alive")
		t.Fatal("not killed")
	case "release":
		var v [8]byte
		_, err = unix.Read(efd, v[:]) // blocks until the DEVICE_RESET event
		require.NoError(t, err)
		require.NoError(t, b.Close())
		time.Sleep(300*time.Millisecond + killGrace + 500*time.Millisecond) // past the watchdog and the grace
		require.Zero(t, d.Stats().Kills)
		require.Equal(t, uint64(1), d.Stats().Resets)
		fmt.Println("child: released, alive")
	default:
		t.Fatalf("unknown role %q", role)
	}
}
