package hlsim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

func TestCB(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m})
			b := r.b
			_, err := hlsys.CBCreate(b, hlsys.MaxCBSize+1, 0)
			isErrno(t, err, unix.EINVAL)
			h, err := hlsys.CBCreate(b, 100, 0)
			require.NoError(t, err)
			require.Equal(t, hlsys.MmapTypeCB<<12|1<<12, h, "handle = (id | MMAP_TYPE_CB) << PAGE_SHIFT, id from 1")
			h2, err := hlsys.CBCreate(b, hlsys.MaxCBSize, 0)
			require.NoError(t, err)
			require.NotEqual(t, h, h2)

			// mmap: exactly the page-rounded size, once.
			_, err = b.Mmap(int64(h), 100)
			require.ErrorIs(t, err, unix.EINVAL)
			_, err = b.Mmap(int64(h), 8192)
			require.ErrorIs(t, err, unix.EINVAL)
			_, err = b.Mmap(int64(h)+4096, 4096)
			require.ErrorIs(t, err, unix.EINVAL)
			mm, err := b.Mmap(int64(h), 4096)
			require.NoError(t, err)
			require.Len(t, mm, 4096)
			mm[0] = 1
			_, err = b.Mmap(int64(h), 4096)
			require.ErrorIs(t, err, unix.EINVAL, "one live mmap per CB")
			require.ErrorIs(t, b.Munmap(mm[100:]), unix.EINVAL) // not from a page start (TestRulesPartialMunmap)
			require.NoError(t, b.Munmap(mm))
			require.NoError(t, b.Munmap(mm), "nothing mapped there: 0, as munmap(2) (TestRulesMunmapNothingMapped)")
			mm, err = b.Mmap(int64(h), 4096)
			require.NoError(t, err)
			require.Equal(t, byte(1), mm[0], "the CB memory persists across mmaps")
			m2, err := b.Mmap(int64(h2), 2<<20)
			require.NoError(t, err)

			// INFO: usage count.
			a := hlsys.CBArgs{Handle: h, Op: hlsys.CBOpInfo}
			require.NoError(t, hlsys.CommandBuffer(b, &a))
			require.Zero(t, a.Handle)
			_, err = hlsys.CBDeviceVA(b, h)
			isErrno(t, err, unix.EINVAL) // not created with CB_FLAGS_MAP

			// DESTROY, twice: EINVAL. The user mapping stays usable until
			// Munmap.
			require.NoError(t, hlsys.CBDestroy(b, h))
			isErrno(t, hlsys.CBDestroy(b, h), unix.EINVAL)
			mm[1] = 2
			require.NoError(t, b.Munmap(mm))
			_, err = b.Mmap(int64(h), 4096)
			require.ErrorIs(t, err, unix.EINVAL)
			a = hlsys.CBArgs{Handle: h, Op: hlsys.CBOpInfo}
			require.ErrorIs(t, hlsys.CommandBuffer(b, &a), unix.EINVAL)
			isErrno(t, hlsys.CBDestroy(b, 0x1234), unix.EINVAL)
			a = hlsys.CBArgs{Op: 9}
			require.ErrorIs(t, hlsys.CommandBuffer(b, &a), unix.EINVAL)
			_ = m2 // released by Close, still mapped

			// CB_FLAGS_MAP: Gaudi2 only.
			hm, err := hlsys.CBCreate(b, 4096, hlsys.CBFlagsMap)
			if m == ModelGaudi1 {
				isErrno(t, err, unix.ENOMEM) // TestRulesCBMapUnsupported
				return
			}
			require.NoError(t, err)
			va, err := hlsys.CBDeviceVA(b, hm)
			require.NoError(t, err)
			require.NotZero(t, va)
			isErrno(t, hlsys.MemUnmap(b, va), unix.EINVAL) // not a user mapping

			// A mapped kernel CB can be submitted by its VA.
			cbm, err := b.Mmap(int64(hm), 4096)
			require.NoError(t, err)
			src, sva := r.host(4096)
			dst, dva := r.host(4096)
			copy(src, pattern(4096, 1))
			copy(cbm, linDMA(false, dva, sva, 4096))
			seq, err := r.submit(0, 0, hlsys.CSChunk{CBHandle: va, CBSize: 24, Flags: hlsys.CSChunkFlagsUserAllocCB})
			require.NoError(t, err)
			out, err := hlsys.WaitForCS(b, seq, uint64(safety.Microseconds()))
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
			require.Equal(t, pattern(4096, 1), dst)

			// After DESTROY the VA is gone: a CS using it faults.
			require.NoError(t, b.Munmap(cbm))
			require.NoError(t, hlsys.CBDestroy(b, hm))
			seq, err = r.submit(0, 0, hlsys.CSChunk{CBHandle: va, CBSize: 24, Flags: hlsys.CSChunkFlagsUserAllocCB})
			require.NoError(t, err)
			out, err = hlsys.WaitForCS(b, seq, uint64(safety.Microseconds()))
			isErrno(t, err, unix.EIO)
			require.Equal(t, uint32(hlsys.WaitCSStatusAborted), out.Status)
		})
	}
}

func TestCBUsageCount(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi1})
	h, err := hlsys.CBCreate(r.b, 4096, 0)
	require.NoError(t, err)
	mm, err := r.b.Mmap(int64(h), 4096)
	require.NoError(t, err)
	copy(mm, nop())
	r.d.DelayNextCS(1, 50*time.Millisecond) // the job runs at once: its CB is free again then
	seq, err := r.submit(0, 0, hlsys.CSChunk{CBHandle: h, CBSize: 8})
	require.NoError(t, err)
	_, err = hlsys.WaitForCS(r.b, seq, uint64(safety.Microseconds()))
	require.NoError(t, err)
	a := hlsys.CBArgs{Handle: h, Op: hlsys.CBOpInfo}
	require.NoError(t, hlsys.CommandBuffer(r.b, &a))
	require.Zero(t, a.Handle)

	registerEventFD(t, r)
	r.d.HangNextCS(1) // a hung CS keeps its CB in use (the TDR is 30 s away)
	seq, err = r.submit(0, 0, hlsys.CSChunk{CBHandle: h, CBSize: 8})
	require.NoError(t, err)
	a = hlsys.CBArgs{Handle: h, Op: hlsys.CBOpInfo}
	require.NoError(t, hlsys.CommandBuffer(r.b, &a))
	require.Equal(t, uint64(1), a.Handle)
	w := waitAsync(r.b, seq, uint64(safety.Microseconds()))
	blockedWaiters(t, r.b, 1)
	// The conditional reset completes the fence (-EIO) but leaves the
	// hardware running: the hung CS still holds its CB (R2).
	r.d.Reset()
	isErrno(t, recvWait(t, w).err, unix.EIO)
	a = hlsys.CBArgs{Handle: h, Op: hlsys.CBOpInfo}
	require.NoError(t, hlsys.CommandBuffer(r.b, &a))
	require.Equal(t, uint64(1), a.Handle)
}
