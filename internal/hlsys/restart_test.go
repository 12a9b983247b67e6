package hlsys

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestRestartEINTR: the fd backends issue an ioctl a signal interrupted
// again, but not WAIT_CS: the driver ends an interrupted wait with -EINTR
// (hl_cs_wait_ioctl, command_submission.c), and issued again with its
// whole timeout a wait that signals keep interrupting would never end.
// Its EINTR goes back to the caller, which waits for the time left.
func TestRestartEINTR(t *testing.T) {
	tests := []struct {
		name      string
		nr        int
		wantErr   error
		wantCalls int
	}{
		{"INFO", nrInfo, nil, 3},
		{"CB", nrCB, nil, 3},
		{"CS", nrCS, nil, 3},
		{"MEMORY", nrMemory, nil, 3},
		{"WAIT_CS", nrWaitCS, unix.EINTR, 1},
	}
	for _, n := range []Numbering{Legacy, Accel} {
		for _, tt := range tests {
			t.Run(n.String()+" "+tt.name, func(t *testing.T) {
				calls := 0
				err := restartEINTR(n.Request(tt.nr), func() unix.Errno {
					calls++
					if calls <= 2 {
						return unix.EINTR
					}
					return 0
				})
				require.Equal(t, tt.wantErr, err)
				require.Equal(t, tt.wantCalls, calls)
				require.Equal(t, tt.wantErr == nil, Restartable(n.Request(tt.nr)))
			})
		}
	}
	calls := 0
	err := restartEINTR(LegacyInfo, func() unix.Errno { calls++; return unix.EFAULT })
	require.Equal(t, unix.EFAULT, err)
	require.Equal(t, 1, calls)
}
