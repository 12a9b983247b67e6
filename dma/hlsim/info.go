package hlsim

import (
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// INFO ops the emulator knows by number but does not answer.
const (
	infoDeviceUtilization    = 6
	infoHwEventsAggregate    = 7
	infoClkRate              = 8
	infoTimeSync             = 10
	infoCSCounters           = 11
	infoClkThrottleReason    = 13
	infoSyncManager          = 14
	infoLastErrOpenDevTime   = 23
	infoCSTimeoutEvent       = 24
	infoRazwiEvent           = 25
	infoDevMemAllocPageSizes = 26
	infoUndefinedOpcodeEvent = 31
	infoPageFaultEvent       = 33
	infoUserMappings         = 34
	infoHwErrEvent           = 36
	infoFwErrEvent           = 37
	infoUserEngineErrEvent   = 38
	infoLastKnownOp61        = 32 // ENGINE_STATUS, the last op of the 6.1 header
	infoLastKnownOpNew       = 40 // DEV_SIGNED
)

// Notifier bits of the newest header (not in hlsys).
const notifierPageFault = 1 << 8

// Emulated identification.
const (
	cardName      = "hlsim-emulated"
	cpucpVersion  = "hlsim emulator: no firmware, no hardware"
	sizeofHwIdle  = 24 // 6.1 hl_info_hw_idle; 40 in the newest header
	sizeofHwIdleN = 40
)

// Layouts of the INFO outputs the emulator writes byte by byte (checked
// against both headers by TestUAPIValues).
const (
	hwIdleBusyOff       = 4  // hl_info_hw_idle.busy_engines_mask (is_idle at 0)
	sizeofResetCount    = 8  // hl_info_reset_count (hard_reset_cnt at 0)
	sizeofOpenStats     = 24 // hl_open_stats_info (open_counter at 0)
	openStatsPeriodOff  = 8  // last_open_period_ms
	openStatsActiveOff  = 16 // is_compute_ctx_active
	openStatsReleaseOff = 17 // compute_ctx_in_release
	sizeofPageSizes     = 8  // hl_info_dev_memalloc_page_sizes (page_order_bitmask at 0)
)

// info serves HL_IOCTL_INFO.
func (c *hctx) info(a *hlsys.InfoArgs) error {
	op := a.Op
	if a.Pad != 0 {
		return unix.EINVAL // "Padding bytes must be 0"
	}
	if !c.d.operational() && !infoWhenNotOperational(op) {
		return unix.EBUSY
	}
	switch op {
	case hlsys.InfoHwIPInfo:
		hw := c.hwIPInfo()
		size := uintptr(hlsys.HwIPInfoSizeNew)
		if !c.d.newInfo {
			size = hlsys.HwIPInfoSize61
		}
		return c.infoOut(a, unsafe.Slice((*byte)(unsafe.Pointer(&hw)), size))
	case hlsys.InfoDramUsage:
		c.memMu.RLock()
		used := c.dramUsed
		c.memMu.RUnlock()
		u := hlsys.DramUsage{DramFreeMem: c.d.cfg.DRAMSize - used, CtxDramMem: used}
		return c.infoOut(a, unsafe.Slice((*byte)(unsafe.Pointer(&u)), unsafe.Sizeof(u)))
	case hlsys.InfoHwIdle:
		var b [sizeofHwIdleN]byte
		busy, anyBusy := c.busyEngines()
		if !anyBusy {
			binary.LittleEndian.PutUint32(b[0:], 1)
		}
		binary.LittleEndian.PutUint32(b[hwIdleBusyOff:], busy)
		n := sizeofHwIdle
		if c.d.newInfo {
			n = sizeofHwIdleN
		}
		return c.infoOut(a, b[:n])
	case hlsys.InfoDeviceStatus:
		s := hlsys.DeviceStatus{Status: c.d.status.Load()}
		return c.infoOut(a, unsafe.Slice((*byte)(unsafe.Pointer(&s)), unsafe.Sizeof(s)))
	case hlsys.InfoResetCount:
		var b [sizeofResetCount]byte
		binary.LittleEndian.PutUint32(b[0:], uint32(c.d.st.resets.Load()))
		return c.infoOut(a, b[:])
	case hlsys.InfoOpenStats:
		var b [sizeofOpenStats]byte
		c.d.mu.Lock()
		binary.LittleEndian.PutUint64(b[0:], c.d.opens)
		if !c.d.lastClose.IsZero() && c.d.lastClose.After(c.d.lastOpen) {
			binary.LittleEndian.PutUint64(b[openStatsPeriodOff:], uint64(c.d.lastClose.Sub(c.d.lastOpen).Milliseconds()))
		}
		if c.d.ctx != nil {
			b[openStatsActiveOff] = 1
			if c.d.ctx.state.Load() != ctxOpen {
				b[openStatsReleaseOff] = 1
			}
		}
		c.d.mu.Unlock()
		return c.infoOut(a, b[:])
	case infoDevMemAllocPageSizes:
		var b [sizeofPageSizes]byte
		binary.LittleEndian.PutUint64(b[:], c.pageSizeMask())
		return c.infoOut(a, b[:])
	case hlsys.InfoRegisterEventFD:
		return c.registerEventFD(int(int32(a.Arg)))
	case hlsys.InfoUnregisterEventFD:
		c.evMu.Lock()
		defer c.evMu.Unlock()
		if c.eventfd < 0 {
			return unix.EINVAL
		}
		_ = unix.Close(c.eventfd)
		c.eventfd = -1
		return nil
	case hlsys.InfoGetEvents:
		// events_info (habanalabs_ioctl.c): return_size < sizeof(u64) or
		// no pointer is EINVAL; the whole mask is copied.
		if a.ReturnPointer == 0 || a.ReturnSize < 8 {
			return unix.EINVAL
		}
		c.evMu.Lock()
		defer c.evMu.Unlock()
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], c.events)
		if err := writeHost(a.ReturnPointer, b[:]); err != nil {
			return unix.EFAULT
		}
		c.events = 0
		return nil
	}
	last := uint32(infoLastKnownOp61)
	if c.d.newInfo {
		last = infoLastKnownOpNew
	}
	if op <= last {
		return unix.EOPNOTSUPP // a real driver answers it; the emulator does not model it
	}
	return unix.EINVAL
}

// infoWhenNotOperational lists the ops _hl_info_ioctl serves before its
// hl_device_operational gate (torvalds habanalabs_ioctl.c); every other op,
// REGISTER_EVENTFD included, is EBUSY while the device is not operational.
func infoWhenNotOperational(op uint32) bool {
	switch op {
	case hlsys.InfoHwIPInfo, hlsys.InfoDeviceStatus, hlsys.InfoResetCount, hlsys.InfoHwEvents,
		infoHwEventsAggregate, infoCSCounters, infoClkThrottleReason, infoSyncManager,
		hlsys.InfoOpenStats, infoLastErrOpenDevTime, infoCSTimeoutEvent, infoRazwiEvent,
		infoUndefinedOpcodeEvent, infoDevMemAllocPageSizes, hlsys.InfoGetEvents,
		infoPageFaultEvent, infoUserMappings, hlsys.InfoUnregisterEventFD, infoHwErrEvent,
		infoFwErrEvent, infoUserEngineErrEvent, hlsys.InfoDramUsage:
		return true
	}
	return false
}

// infoOut copies min(return_size, len(b)) bytes to return_pointer.
func (c *hctx) infoOut(a *hlsys.InfoArgs, b []byte) error {
	if a.ReturnPointer == 0 || a.ReturnSize == 0 {
		return unix.EINVAL
	}
	if err := writeHost(a.ReturnPointer, b[:min(int(a.ReturnSize), len(b))]); err != nil {
		return unix.EFAULT
	}
	return nil
}

func (c *hctx) hwIPInfo() hlsys.HwIPInfo {
	d := c.d
	a := &d.amap
	hw := hlsys.HwIPInfo{
		SramBaseAddress:               a.sramBase,
		DramBaseAddress:               a.dramBase,
		DramSize:                      a.dramSize,
		SramSize:                      uint32(a.sramSize),
		ModuleID:                      uint32(d.cfg.Index),
		DramEnabled:                   1,
		DramPageSize:                  a.dramPage,
		DeviceMemAllocDefaultPageSize: a.dramPage,
	}
	switch {
	case a.gaudi3:
		hw.DeviceID = hlsys.DeviceIDGaudi3
		hw.RevisionID = 1
		hw.Reserved3 = G3UserChannelMask // pdma_user_owned_ch_mask
		hw.FirstAvailableInterruptID = g3FirstUserInterrupt
		hw.NumberOfUserInterrupts = g3UserInterrupts
	case a.gaudi2:
		hw.DeviceID = hlsys.DeviceIDGaudi2
		hw.RevisionID = 1
	default:
		hw.DeviceID = hlsys.DeviceIDGaudi
	}
	copy(hw.CardName[:len(hw.CardName)-1], cardName)
	copy(hw.CpucpVersion[:len(hw.CpucpVersion)-1], cpucpVersion)
	return hw
}

// pageSizeMask is DEV_MEM_ALLOC_PAGE_SIZES: bit k set means ALLOC takes
// page_size 2^k. The driver answers dmmu.supported_pages_mask
// (habanalabs_ioctl.c dev_mem_alloc_page_sizes_info), which neither
// Gaudi1 nor Gaudi2 sets (gaudi2_set_fixed_properties): 0, and their
// ALLOC ignores page sizes. Gaudi3's mask was not read (RULES.md open
// questions): the model answers powers of two from 4 KiB to 1 GiB.
func (c *hctx) pageSizeMask() uint64 {
	if !c.d.amap.gaudi3 {
		return 0
	}
	var m uint64
	for k := 12; k <= 30; k++ {
		m |= 1 << k
	}
	return m
}

// registerEventFD keeps a dup of the user's eventfd (the driver takes a
// reference on the eventfd context the same way).
func (c *hctx) registerEventFD(fd int) error {
	if fd < 0 {
		return unix.EBADF
	}
	c.evMu.Lock()
	defer c.evMu.Unlock()
	if c.eventfd >= 0 {
		return unix.EINVAL
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return unix.EBADF
	}
	target, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(dup))
	if err != nil || !strings.Contains(target, "[eventfd]") {
		_ = unix.Close(dup)
		return unix.EINVAL
	}
	c.eventfd = dup
	return nil
}

// busyEngines is a bitmask of queues (ids below 32) with work queued or
// running; is_idle also accounts for the queues above.
func (c *hctx) busyEngines() (mask uint32, any bool) {
	c.csMu.Lock()
	defer c.csMu.Unlock()
	for q, e := range c.engines {
		if e.busy() {
			any = true
			if q < 32 {
				mask |= 1 << q
			}
		}
	}
	return mask, any
}
