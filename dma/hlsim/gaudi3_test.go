package hlsim

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/gaudi3"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// g3rig is a Gaudi3 context with one PDMA channel programmed by hand, as
// docs/gaudi3.md section 5.1 describes, independently of package dma.
type g3rig struct {
	*rig
	ch      int
	regs    []byte
	ring    []byte
	ringVA  uint64
	cqH     uint64
	cqMem   []byte
	scratch uint64
	pi      uint32
	bell    bool // call the Doorbell hint after MSQ_PI stores
}

const g3TestRing = 1 << 16

func newG3Rig(t *testing.T, cfg Config, ch int) *g3rig {
	t.Helper()
	cfg.Model = ModelGaudi3
	r := &g3rig{rig: newRig(t, cfg), ch: ch, bell: true}
	addr, err := gaudi3.ChAMapAddr(ch)
	require.NoError(t, err)
	h, size, err := hlsys.MemMapBlock(r.b, addr)
	require.NoError(t, err)
	require.Equal(t, uint32(gaudi3.ChASize), size)
	r.regs, err = r.b.Mmap(int64(h), int(size))
	require.NoError(t, err)
	r.ring, r.ringVA = r.host(g3TestRing)
	r.cqH, err = hlsys.CBCreate(r.b, 4096, hlsys.CBFlagsMap)
	require.NoError(t, err)
	cqVA, err := hlsys.CBDeviceVA(r.b, r.cqH)
	require.NoError(t, err)
	r.cqMem, err = r.b.Mmap(int64(r.cqH), 4096)
	require.NoError(t, err)
	r.scratch = r.dram(4096)
	r.w(gaudi3.RegDescSubmitFifoCfg, gaudi3.FifoCfgMSQ)
	r.w(gaudi3.RegMSQBaseHi, uint32(r.ringVA>>32))
	r.w(gaudi3.RegMSQBaseLo, uint32(r.ringVA))
	r.w(gaudi3.RegMSQSize, g3TestRing-1)
	r.w(gaudi3.RegECQBaseLo, uint32(cqVA))
	r.w(gaudi3.RegECQBaseHi, uint32(cqVA>>32))
	r.w(gaudi3.RegECQBaseSize, gaudi3.ECQCounterSize)
	msix := uint64(gaudi3.CfgBarBase + gaudi3.MSIXOffset)
	r.w(gaudi3.RegECQLBWAddrLo, uint32(msix))
	r.w(gaudi3.RegECQLBWAddrHi, uint32(msix>>32))
	r.w(gaudi3.RegECQLBWPayload, g3FirstUserInterrupt)
	r.w(gaudi3.RegECQChCfg, 0b111)
	return r
}

func (r *g3rig) w(off int, v uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&r.regs[off])), v)
}
func (r *g3rig) rd(off int) uint32 { return atomic.LoadUint32((*uint32)(unsafe.Pointer(&r.regs[off]))) }
func (r *g3rig) counter() uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&r.cqMem[0])))
}

// lin is a LIN_PDMA as dma builds it: completion write to scratch, CQ advance.
func (r *g3rig) lin(dst, src uint64, n uint32, dir gaudi3.Dir) []byte {
	b, err := gaudi3.LinPDMA{Src: src, Dst: dst, Size: n, Dir: dir, IncContextID: true, DescCommit: true,
		AdvanceCQ: true, WrComp: true, WrCompAddr: r.scratch}.Append(nil)
	require.NoError(r.t, err)
	return b
}

// post writes packets at the producer index and rings the doorbell.
func (r *g3rig) post(pkts []byte) {
	off := r.pi & (g3TestRing - 1)
	copy(r.ring[off:], pkts)
	r.pi += uint32(len(pkts))
	r.w(gaudi3.RegMSQPI, r.pi)
	if r.bell {
		r.b.(*hctx).Doorbell(r.regs)
	}
}

// wait waits for the counter to reach target through WAIT_CS on the
// channel's interrupt.
func (r *g3rig) wait(target uint64) (hlsys.WaitCSOut, error) {
	return hlsys.WaitForInterruptKernelCQ(r.b, r.cqH, 0, target, g3FirstUserInterrupt, uint64(safety/time.Microsecond))
}

func TestGaudi3Info(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi3})
	require.Equal(t, uint32(hlsys.DeviceIDGaudi3), r.info.DeviceID)
	require.True(t, hlsys.IsGaudi3(r.info.DeviceID))
	mask := r.info.PDMAUserOwnedChMask()
	require.Zero(t, mask&(1<<gaudi3.KDMAChannel), "the KDMA channel is the driver's")
	require.Len(t, gaudi3.UserChannels(mask), gaudi3.PDMAChannels-1)
	require.Equal(t, uint16(g3FirstUserInterrupt), r.info.FirstAvailableInterruptID)
	require.Equal(t, uint16(g3UserInterrupts), r.info.NumberOfUserInterrupts)
	require.Equal(t, uint64(g3DRAMBase), r.info.DramBaseAddress)
	require.Empty(t, r.d.EmulatedQueues())
}

// TestRulesGaudi3NoUserQueue: G1.
func TestRulesGaudi3NoUserQueue(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi3})
	m, va := r.host(4096)
	_ = m
	for _, q := range []uint32{0, 1, 4, 260} {
		_, err := r.submit(0, 0, hlsys.CSChunk{CBHandle: va, QueueIndex: q, CBSize: 8, Flags: hlsys.CSChunkFlagsUserAllocCB})
		isErrno(t, err, unix.EINVAL)
	}
}

// TestRulesGaudi3MapBlock: G2, G3.
func TestRulesGaudi3MapBlock(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi3})
	for _, ch := range []int{0, 5, 6, 12, 22} {
		addr, err := gaudi3.ChAMapAddr(ch)
		require.NoError(t, err)
		h, size, err := hlsys.MemMapBlock(r.b, addr)
		require.NoError(t, err, "channel %d", ch)
		require.Equal(t, uint32(gaudi3.ChASize), size)
		require.NotZero(t, (h>>12)&hlsys.MmapTypeBlock, "handle carries the block mmap type")
		_, err = r.b.Mmap(int64(h), int(size)+4096)
		isErrno(t, err, unix.EINVAL)
		_, err = r.b.Mmap(int64(h), 2048)
		isErrno(t, err, unix.EINVAL)
		m, err := r.b.Mmap(int64(h), int(size))
		require.NoError(t, err)
		require.NoError(t, r.b.Munmap(m))
	}
	kdma, _ := gaudi3.ChAMapAddr(gaudi3.KDMAChannel)
	chB, _ := gaudi3.ChBOffset(0)
	ch0, _ := gaudi3.ChAMapAddr(0)
	for name, addr := range map[string]uint64{
		"KDMA channel": kdma, "CH_B": gaudi3.CfgBarBase + chB, "inside CH_A": ch0 + 0x1F8,
		"offset without CFG_BAR_BASE": ch0 - gaudi3.CfgBarBase, "zero": 0,
	} {
		_, _, err := hlsys.MemMapBlock(r.b, addr)
		isErrno(t, err, unix.EINVAL)
		_ = name
	}
	g2 := newRig(t, Config{Model: ModelGaudi2})
	_, _, err := hlsys.MemMapBlock(g2.b, ch0)
	isErrno(t, err, unix.EOPNOTSUPP)
}

func TestGaudi3Copy(t *testing.T) {
	for _, bell := range []bool{true, false} {
		r := newG3Rig(t, Config{}, 1)
		r.bell = bell // without the hint the worker finds MSQ_PI by polling
		src, srcVA := r.host(1 << 20)
		dst, dstVA := r.host(1 << 20)
		copy(src, pattern(1<<20, 3))
		dev := r.dram(1 << 20)
		r.post(cat(r.lin(dev+5, srcVA+1, 1<<19+3, gaudi3.DirHostToDevice), r.lin(dev+1<<19+64, dev+5, 1<<19+3, gaudi3.DirHostToDevice)))
		out, err := r.wait(2)
		require.NoError(t, err)
		require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
		r.post(r.lin(dstVA+7, dev+1<<19+64, 1<<19+3, gaudi3.DirDeviceToHost))
		out, err = r.wait(3)
		require.NoError(t, err)
		require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
		require.Equal(t, src[1:1+1<<19+3], dst[7:7+1<<19+3])
		require.Equal(t, uint64(3), r.counter())
		require.Equal(t, r.pi, r.rd(gaudi3.RegMSQCI), "MSQ_CI follows the consumed packets")
		require.Equal(t, uint32(3), r.rd(gaudi3.RegECQBasePI))
		st := r.d.Stats()
		require.Equal(t, uint64(3), st.PacketsExecuted)
		require.Zero(t, st.EngineFaults)
	}
}

// TestGaudi3ChannelSpinsBeforeParking: G6. After work a channel's worker
// polls for the next doorbell for Config.EngineSpin before it parks, as a
// Gaudi1/2 engine polls its queue (TestEngineSpinsBeforeParking): a
// doorbell within the window needs no wake-up. With no spin it parks once
// its work is done.
func TestGaudi3ChannelSpinsBeforeParking(t *testing.T) {
	for _, tc := range []struct {
		name      string
		spin      time.Duration
		wantParks bool
	}{
		{"spin window", 2 * time.Second, false},
		{"no spin", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newG3Rig(t, Config{EngineSpin: tc.spin}, 1)
			_, srcVA := r.host(4096)
			dev := r.dram(4096)
			parks := r.d.Stats().EngineParks
			r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice))
			out, err := r.wait(1)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
			if tc.wantParks {
				// It parks when it gets the CPU: wait for it, do not time it.
				require.Eventually(t, func() bool { return r.d.Stats().EngineParks > parks }, 10*time.Second, time.Millisecond)
				return
			}
			time.Sleep(10 * time.Millisecond) // idle, well within the window
			r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice))
			out, err = r.wait(2)
			require.NoError(t, err)
			require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
			require.Zero(t, r.d.Stats().EngineParks-parks, "parks between the doorbells")
		})
	}
}

// TestRulesGaudi3InterruptWait: W11-W15.
func TestRulesGaudi3InterruptWait(t *testing.T) {
	r := newG3Rig(t, Config{}, 0)
	wait := func(id uint32, cb, idx, target, us uint64) (hlsys.WaitCSOut, error) {
		return hlsys.WaitForInterruptKernelCQ(r.b, cb, idx, target, id, us)
	}
	_, err := wait(g3FirstUserInterrupt-1, r.cqH, 0, 1, 1000)
	isErrno(t, err, unix.EINVAL)
	_, err = wait(g3FirstUserInterrupt+g3UserInterrupts, r.cqH, 0, 1, 1000)
	isErrno(t, err, unix.EINVAL)
	_, err = wait(g3FirstUserInterrupt, r.cqH+(99<<12), 0, 1, 1000)
	isErrno(t, err, unix.EINVAL)
	_, err = wait(g3FirstUserInterrupt, r.cqH, 512, 1, 1000)
	isErrno(t, err, unix.EINVAL) // index beyond the CB
	out, err := wait(g3FirstUserInterrupt, r.cqH, 0, 0, 0)
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status, "counter already at the target")
	out, err = wait(g3FirstUserInterrupt, r.cqH, 0, 1, 0)
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.WaitCSStatusBusy), out.Status, "timeout 0 polls")
	out, err = wait(g3FirstUserInterrupt, r.cqH, 0, 1, 2000)
	require.NoError(t, err, "a timeout is no error: the driver does not know the workload")
	require.Equal(t, uint32(hlsys.WaitCSStatusBusy), out.Status)

	// The counter in user memory, any-CQ interrupt id.
	_, dstVA := r.host(4096)
	src, srcVA := r.host(4096)
	copy(src, "x")
	r.post(r.lin(dstVA, srcVA, 4096, gaudi3.DirHostToDevice))
	ctr := (*uint64)(unsafe.Pointer(&r.cqMem[0]))
	out, err = hlsys.WaitForInterruptUser(r.b, ctr, 1, hlsys.WaitCSFlagsAnyCQInterrupt>>hlsys.WaitCSFlagsInterruptShift, uint64(safety/time.Microsecond))
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)

	// A conditional reset ends a blocked wait ABORTED with EIO
	// (hl_abort_waiting_for_completions); while the release watchdog runs
	// every WAIT_CS is EBUSY, interrupt waits too (R3).
	registerEventFD(t, r.rig)
	done := make(chan error, 1)
	go func() {
		_, err := wait(g3FirstUserInterrupt, r.cqH, 0, 100, uint64(safety/time.Microsecond))
		done <- err
	}()
	require.Eventually(t, func() bool { return r.b.(*hctx).waiting.Load() == 1 }, safety, time.Millisecond)
	r.d.Reset()
	isErrno(t, <-done, unix.EIO)
	_, err = wait(g3FirstUserInterrupt, r.cqH, 0, 1, 0)
	isErrno(t, err, unix.EBUSY)
	require.Zero(t, r.d.Stats().Resets, "the watchdog is armed, no reset yet")
	require.NotZero(t, r.rd(gaudi3.RegMSQSize), "the channel keeps its registers until the hard reset")

	// Not operational: EBUSY (W1).
	r.d.ForceStatus(hlsys.DeviceStatusInReset)
	_, err = wait(g3FirstUserInterrupt, r.cqH, 0, 1, 0)
	isErrno(t, err, unix.EBUSY)
	r.d.ForceStatus(hlsys.DeviceStatusOperational)
}

// TestGaudi3Faults: the injected faults and channel errors (G6-G9).
func TestGaudi3Faults(t *testing.T) {
	r := newG3Rig(t, Config{}, 2)
	_, dstVA := r.host(4096)
	_, srcVA := r.host(4096)
	pkt := r.lin(dstVA, srcVA, 4096, gaudi3.DirHostToDevice)

	r.d.DelayNextCS(1, 30*time.Millisecond)
	start := time.Now()
	r.post(pkt)
	out, err := r.wait(1)
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
	require.GreaterOrEqual(t, time.Since(start), 25*time.Millisecond, "completion held back")

	r.d.HangNextCS(1)
	r.post(pkt)
	out, err = hlsys.WaitForInterruptKernelCQ(r.b, r.cqH, 0, 2, g3FirstUserInterrupt, 20000)
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.WaitCSStatusBusy), out.Status, "a hung doorbell never completes")
	r.post(pkt)
	time.Sleep(5 * time.Millisecond)
	require.Equal(t, uint64(1), r.counter(), "the channel is stuck behind the hung doorbell")

	// Stopping the queue (CQ_RECONFIG) drops the stuck work; programming
	// MSQ_PI/CI again and restarting runs new work.
	r.w(gaudi3.RegCQReconfig, 1)
	r.b.(*hctx).Doorbell(r.regs)
	r.w(gaudi3.RegMSQCI, 0)
	r.pi = 0
	r.w(gaudi3.RegMSQPI, 0)
	r.w(gaudi3.RegCQReconfig, 0)
	r.post(pkt)
	_, err = r.wait(2)
	require.NoError(t, err)
	require.Equal(t, uint64(2), r.counter())

	// An injected abort and a channel error reset the device: registers
	// cleared, RESET_COUNT up, a notifier event for the error.
	resets := r.d.Stats().Resets
	r.d.AbortNextCS(1)
	r.post(pkt)
	require.Eventually(t, func() bool { return r.d.Stats().Resets == resets+1 }, safety, time.Millisecond)
	require.Zero(t, r.rd(gaudi3.RegMSQSize), "registers cleared by the reset")
	require.Equal(t, uint64(2), r.counter(), "the aborted doorbell moved nothing")

	r2 := newG3Rig(t, Config{}, 3)
	r2.post(r2.lin(dstVA, 0x1234_0000_0000, 4096, gaudi3.DirHostToDevice)) // unmapped source
	require.Eventually(t, func() bool { return r2.d.Stats().Resets == 1 }, safety, time.Millisecond)
	require.Equal(t, uint64(1), r2.d.Stats().EngineFaults)
	require.Zero(t, r2.counter())
}

// TestRulesGaudi3Ring: G10, G11 (the model's conservative reading).
func TestRulesGaudi3Ring(t *testing.T) {
	r := newG3Rig(t, Config{}, 4)
	_, dstVA := r.host(4096)
	_, srcVA := r.host(4096)
	pkt := r.lin(dstVA, srcVA, 64, gaudi3.DirHostToDevice)
	// Fill up to 16 bytes before the end, then a 40-byte packet straddles it.
	var nops []byte
	for len(nops) < g3TestRing-16 {
		b, _ := gaudi3.NOP{}.Append(nil)
		nops = append(nops, b...)
	}
	r.post(nops)
	require.Eventually(t, func() bool { return r.rd(gaudi3.RegMSQCI) == r.pi }, safety, time.Millisecond)
	r.post(pkt)
	require.Eventually(t, func() bool { return r.d.Stats().Resets == 1 }, safety, time.Millisecond)
	require.Zero(t, r.counter())

	// A ring size that is not a power of two.
	r2 := newG3Rig(t, Config{}, 5)
	r2.w(gaudi3.RegMSQSize, 3*4096-1)
	r2.post(r2.lin(dstVA, srcVA, 64, gaudi3.DirHostToDevice))
	require.Eventually(t, func() bool { return r2.d.Stats().Resets == 1 }, safety, time.Millisecond)

	// advcnt_hbw_complq without a completion write is refused.
	r3 := newG3Rig(t, Config{}, 0)
	b, err := gaudi3.LinPDMA{Src: srcVA, Dst: dstVA, Size: 64, AdvanceCQ: true}.Append(nil)
	require.NoError(t, err)
	r3.post(b)
	require.Eventually(t, func() bool { return r3.d.Stats().Resets == 1 }, safety, time.Millisecond)
	require.Equal(t, uint32(0), binary.LittleEndian.Uint32(r3.cqMem))
}

// TestGaudi3DoorbellDuringWork: a doorbell returns while its channel runs
// earlier work (as a store to MSQ_PI does), and the work it announces
// runs after that work, as its own submission.
func TestGaudi3DoorbellDuringWork(t *testing.T) {
	r, srcVA, dev := newG3CopyRig(t)
	entered, release := make(chan struct{}), make(chan struct{})
	r.d.setExecHook(stopOnce(entered, release))
	r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice))
	select {
	case <-entered:
	case <-time.After(safety):
		t.Fatal("the channel did not start the first doorbell's work")
	}
	rang := make(chan struct{})
	go func() {
		defer close(rang)
		r.post(r.lin(dev+4096, srcVA, 4096, gaudi3.DirHostToDevice))
	}()
	select {
	case <-rang:
	case <-time.After(5 * time.Second):
		close(release)
		<-rang
		t.Fatal("Doorbell waited for the channel's running work")
	}
	close(release)
	out, err := r.wait(2)
	require.NoError(t, err)
	require.Equal(t, uint32(hlsys.WaitCSStatusCompleted), out.Status)
	require.Equal(t, uint64(2), r.d.Stats().CSSubmitted, "each doorbell is one submission")
	require.Equal(t, uint64(2), r.counter())
}

// TestGaudi3DoorbellAfterPILook: a Doorbell that comes after the channel's
// worker saw MSQ_PI move (to a PI stored without a doorbell) and before
// it compares the doorbells' marks with it. The worker must take the
// doorbell's PI with its mark: the fault injected for that submission
// (a hang) happens, and no submission is counted twice.
func TestGaudi3DoorbellAfterPILook(t *testing.T) {
	r, srcVA, dev := newG3CopyRig(t)
	looked, release := make(chan struct{}), make(chan struct{})
	hook := stopOnce(looked, release)
	r.d.pollHook.Store(&hook)
	r.bell = false
	r.post(r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice)) // found by polling
	<-looked
	r.bell = true
	r.d.HangNextCS(1) // drawn by the next doorbell
	r.post(r.lin(dev+4096, srcVA, 4096, gaudi3.DirHostToDevice))
	close(release)
	_, err := hlsys.WaitForInterruptKernelCQ(r.b, r.cqH, 0, 2, g3FirstUserInterrupt, uint64((300 * time.Millisecond).Microseconds()))
	require.NoError(t, err)
	require.Less(t, r.counter(), uint64(2), "the doorbell's submission drew a hang")
	require.LessOrEqual(t, r.d.Stats().CSSubmitted, uint64(2))
}

// newG3CopyRig is a one-channel Gaudi3 rig with a 4 KiB host source
// (filled) and 8 KiB of device memory.
func newG3CopyRig(t *testing.T) (r *g3rig, srcVA, dev uint64) {
	r = newG3Rig(t, Config{}, 1)
	src, srcVA := r.host(4096)
	copy(src, pattern(4096, 5))
	return r, srcVA, r.dram(8192)
}

// stopOnce is a worker hook that, the first time it runs, closes entered
// and waits for release.
func stopOnce(entered, release chan struct{}) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			close(entered)
			<-release
		})
	}
}

// TestGaudi3DropCountsAnnouncedDoorbells: a channel stopped or reset with
// doorbells announced (counted submitted) but not yet taken ends them
// ABORTED, as it does the hung one: every submission ends once,
// CSSubmitted = CSCompleted + CSAborted + CSTimedOut.
func TestGaudi3DropCountsAnnouncedDoorbells(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop func(r *g3rig)
	}{
		{"stop", func(r *g3rig) {
			r.w(gaudi3.RegCQReconfig, 1)
			r.b.(*hctx).Doorbell(r.regs)
		}},
		{"reset", func(r *g3rig) {
			r.d.Reset() // no eventfd: a hard reset at once, in the background
			require.Eventually(t, func() bool { return r.d.Stats().Resets == 1 }, safety, time.Millisecond)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, srcVA, dev := newG3CopyRig(t)
			pkt := r.lin(dev, srcVA, 4096, gaudi3.DirHostToDevice)
			r.d.HangNextCS(1)
			r.post(pkt) // the channel sticks here
			require.Eventually(t, func() bool {
				r.channel().mu.Lock()
				defer r.channel().mu.Unlock()
				return r.channel().stalled
			}, safety, time.Millisecond)
			r.post(pkt) // announced, never taken
			r.post(pkt)
			tc.drop(r)
			st := r.d.Stats()
			require.Equal(t, uint64(3), st.CSSubmitted)
			require.Zero(t, st.CSCompleted)
			require.Equal(t, st.CSSubmitted, st.CSCompleted+st.CSAborted+st.CSTimedOut, "%+v", st)
		})
	}
}

// channel is the rig's channel as the model holds it.
func (r *g3rig) channel() *g3chan { return r.b.(*hctx).g3chans[r.ch] }

// TestGaudi3ChannelErrorHalts: a PDMA channel error (here injected)
// halts the channel. With an eventfd registered the device is not reset
// until the context is released, and the channel must not meanwhile run
// the failed submission again: it used to, found by polling, so the
// copy completed after all.
func TestGaudi3ChannelErrorHalts(t *testing.T) {
	r := newG3Rig(t, Config{}, 2)
	efd := registerEventFD(t, r.rig)
	_, dstVA := r.host(4096)
	_, srcVA := r.host(4096)
	pkt := r.lin(dstVA, srcVA, 4096, gaudi3.DirHostToDevice)
	r.d.AbortNextCS(1)
	r.post(pkt)
	waitEvent(t, efd, safety)
	time.Sleep(20 * time.Millisecond)
	st := r.d.Stats()
	require.Zero(t, r.counter(), "the failed submission ran")
	require.Zero(t, st.PacketsExecuted)
	require.Equal(t, uint64(1), st.CSSubmitted, "counted once")
	require.Zero(t, st.Resets, "no reset before the release")
}

// TestRulesGaudi3OutOfTreeDriverOnly (row G13): Gaudi3 is served only by
// HabanaAI/drivers.accel.habanalabs.kernel, which registers
// /dev/accel/accelN and serves the DRM accel ioctl numbers on every kernel
// (habanalabs_compat_accel.c hl_accel_init, accel_devnode; habanalabs_drv.c
// hl_ioctls: DRM_IOCTL_HL_* without CONFIG_DRM_ACCEL too) and has the
// fixed EXPORT_DMABUF_FD (MEMOOT). The emulator made a Gaudi3 with the
// legacy 'H' numbers and the 6.1 or 6.3-6.6 export (offset ignored) out of
// Config.Kernel below 6.7: a driver that does not exist.
func TestRulesGaudi3OutOfTreeDriverOnly(t *testing.T) {
	for _, tc := range []struct {
		kernel string
		ok     bool
	}{
		{"6.1", false}, {"6.5", false}, {"6.6.30", false}, {"6.7", true}, {"6.8", true},
	} {
		t.Run(tc.kernel, func(t *testing.T) {
			d, err := New(Config{Model: ModelGaudi3, Kernel: tc.kernel, DRAMSize: 64 << 20})
			if !tc.ok {
				require.Error(t, err)
				require.Nil(t, d)
				return
			}
			require.NoError(t, err)
			defer func() { require.NoError(t, d.Close()) }()
			require.Equal(t, hlsys.Accel, d.numbering())
		})
	}
}

// setExecHook sets the Gaudi3 workers' execHook.
func (d *Device) setExecHook(f func()) { d.execHook.Store(&f) }
