package hlsim

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// TestRulesGaudi3InterruptIDs (W11): the interrupt ids WAIT_CS takes on
// Gaudi3, as hl_interrupt_wait_ioctl (drivers.accel.habanalabs.kernel
// common/command_submission.c) sorts them: the user interrupt range,
// HL_COMMON_USER_CQ_INTERRUPT_ID (the all-ones id, any CQ) and
// HL_COMMON_DEC_INTERRUPT_ID (0xFFE, any decoder); anything else is
// "invalid user interrupt", EINVAL. The emulator refused the any-decoder
// id. Ids below user_dec_intr_count (one per enabled decoder) are not
// modeled: Gaudi3's count and decoder mask were not read.
func TestRulesGaudi3InterruptIDs(t *testing.T) {
	r := newG3Rig(t, Config{}, 0)
	for _, tc := range []struct {
		name  string
		id    uint32
		errno unix.Errno // 0: taken (BUSY: the counter is below the target)
	}{
		{"first user interrupt", g3FirstUserInterrupt, 0},
		{"last user interrupt", g3FirstUserInterrupt + g3UserInterrupts - 1, 0},
		{"past the user range", g3FirstUserInterrupt + g3UserInterrupts, unix.EINVAL},
		{"any CQ (HL_COMMON_USER_CQ_INTERRUPT_ID)", hlsys.WaitCSFlagsAnyCQInterrupt >> hlsys.WaitCSFlagsInterruptShift, 0},
		{"any decoder (HL_COMMON_DEC_INTERRUPT_ID)", hlsys.WaitCSFlagsAnyDecInterrupt >> hlsys.WaitCSFlagsInterruptShift, 0},
		{"0xFFD", 0xFFD, unix.EINVAL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, us := range []uint64{0, 1000} {
				out, err := hlsys.WaitForInterruptKernelCQ(r.b, r.cqH, 0, 1, tc.id, us)
				if tc.errno != 0 {
					isErrno(t, err, tc.errno)
					continue
				}
				require.NoError(t, err, "timeout %d us", us)
				require.Equal(t, uint32(hlsys.WaitCSStatusBusy), out.Status, "timeout %d us", us)
			}
		})
	}
}
