// Package hlsim emulates an Intel Gaudi (Gaudi1), Gaudi2 or Gaudi3 and its
// habanalabs driver behind the same ioctl contract as the real device
// node, so that everything above internal/hlsys (package dma and up) runs
// unchanged in CI and on machines without the hardware. It is labelled as
// emulated everywhere: the backend's Name is "hlsimN (emulated)", its
// Emulated method reports true and HW_IP_INFO's card name is
// "hlsim-emulated".
//
// # Contract
//
//	dev, _ := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi2})
//	defer dev.Close()
//	d, _ := dma.OpenBackend(dev.Name(), dev.Open, dma.Options{}) // a second Open: EBUSY
//	defer d.Close()
//	info := d.Info()
//
// The backend Open returns (a dma.Backend; inside the module also an
// internal/hlsys Backend) answers the typed functions of internal/hlsys
// exactly like a
// /dev/accel/accelN (kernel >= 6.7) or /dev/hlN (older) node: Ioctl
// decodes the request with hlsys.Decode and refuses a request of the
// other numbering (ENOTTY), reads and writes the argument struct in place
// and reaches user pointers inside it (INFO return buffers, CS chunk
// arrays, USERPTR host memory, host memory reached by DMA, Gaudi2 user
// CBs) the way the kernel uses copy_from_user: a bad pointer yields EFAULT
// (or a failed CS), never a crash, and no uint64 is ever turned into an
// unsafe.Pointer. DMA and INFO buffers go through process_vm_readv/writev
// on the own process; the small arrays an ioctl reads (CS chunks, a user
// counter) are read in place on amd64, a fault there recovered as EFAULT
// (copyIn), since a system call per CS would dwarf the driver's cost. Failing
// ioctls return a bare unix.Errno (hlsys wraps it in *hlsys.Error); the
// WAIT_CS output is written before -ETIMEDOUT/-EIO is returned, as the
// driver's dispatcher copies it out on failure.
//
// # What is modeled
//
// RULES.md lists every driver rule the emulator follows, with the kernel
// function it mirrors, the errno and the test that shows it; where the
// source does not settle a question it says so. In short:
//
//   - INFO: HW_IP_INFO (256 bytes on 6.1, 304 from 6.3; min(return_size,
//     size) is copied), DRAM_USAGE, HW_IDLE, DEVICE_STATUS, RESET_COUNT,
//     OPEN_STATS, DEV_MEM_ALLOC_PAGE_SIZES, REGISTER/UNREGISTER_EVENTFD,
//     GET_EVENTS. Other ops of the header return EOPNOTSUPP, unknown ops
//     EINVAL; during a reset only the ops the driver serves then answer
//     (others EBUSY).
//   - MEMORY: Gaudi2 ALLOC (idr handle >= 1, size rounded up to the page,
//     the user page size ignored as the driver's Gaudi2 does, ENOMEM
//     beyond the DRAM; Gaudi3 takes a power-of-2 page size), MAP of a handle
//     (DMMU VA aligned to the DRAM page), FREE (EINVAL while mapped or
//     exported), UNMAP (exact VA only). Gaudi1 ALLOC/FREE are unchecked
//     accounting (handle 0; FREE takes the size), MAP of a device handle
//     is EINVAL and DRAM addresses are physical. Both: MAP with USERPTR
//     (the range must be mapped in the process, else EFAULT; the VA keeps
//     the in-page offset; the hint rules of get_va_block; 2 MiB PMMU pages
//     only for hugetlbfs-backed 2 MiB ranges, the emulator's stand-in for
//     2 MiB-aligned DMA addresses), EXPORT_DMABUF_FD in the 6.1
//     {handle, size} form and the {addr, size, offset} form as 6.3-6.6
//     (offset validated, then ignored) and 6.7+ (page multiples, offset
//     honoured) implement it; any dma-buf file flags. MAP_BLOCK (Gaudi1/2)
//     and TS_ALLOC: EOPNOTSUPP. A failed ALLOC, MAP or EXPORT clears the
//     args and writes its output (0, fd -EBADF) as hl_mem_ioctl does.
//   - CB: CREATE (up to HL_MAX_CB_SIZE; smaller than a page, 0 included,
//     becomes a page; handle = mmap offset), DESTROY, INFO (usage count, or
//     the device VA of a CB created with CB_FLAGS_MAP on Gaudi2), Mmap of
//     exactly the page-rounded size, once per CB; a CB destroyed while
//     mmapped lives (handle, memory, device VA) until Munmap.
//   - CS: validated like the driver, in its order. Gaudi1 external queues
//     0-7 take kernel CB handles (USER_ALLOC_CB ignored) parsed at
//     submission (EINVAL/EPERM); Gaudi2 takes user CB addresses with
//     USER_ALLOC_CB on PDMA_0_0, PDMA_0_1, PDMA_1_0 (0, 1, 4) and the 32
//     EDMA queues, refuses PDMA 2, 3, 5-7 (EINVAL, disabled for the ARC
//     firmware) and a CB outside SRAM/DMMU/PMMU (EFAULT), and fetches the
//     CB through the MMU when the job runs. Queues the driver takes but the
//     emulator does not model (Gaudi1 internal, Gaudi2 compute): EOPNOTSUPP.
//     Sequence numbers start at 1; EAGAIN while the completion slot
//     seq&(MaxPendingCS-1) is busy (64 slots, 16K on Gaudi1); a CS refused after that used its
//     sequence number (WAIT_CS reports it COMPLETED) and returns seq
//     ULLONG_MAX and -errno in its output; EPERM when the device stops
//     being operational before the CS is scheduled. TIMESTAMP,
//     CUSTOM_TIMEOUT and SKIP_RESET_ON_TIMEOUT are honoured; restore
//     chunks are ignored without FORCE_RESTORE (no ASIC modeled sets
//     supports_ctx_switch); a staged CS is EPERM on Gaudi2; the restore
//     phase, signal/wait, Gaudi1 staged, encapsulated-signal and
//     engine-core CSs return EOPNOTSUPP.
//   - Engines: one goroutine per queue, started on first use, runs its
//     jobs in order; an idle engine polls its queue for Config.EngineSpin
//     (default 100 us) before it parks, as a queue manager fetches new
//     work without being woken; jobs of one CS on different queues run
//     concurrently; the CS ends when all its
//     jobs have. LIN_DMA (copy with memmove semantics, or memset of the
//     64-bit value in src_addr; Gaudi1 masks dst to 56 bits) and NOP are
//     executed. Any other packet, a truncated packet, an unmapped byte or a
//     host page that went away fails the job: the CS ends ABORTED (WAIT_CS
//     -EIO) and the context gets a notifier event (UNDEFINED_OPCODE for
//     packets, GENERAL_HW_ERR and, from 6.3, PAGE_FAULT for MMU faults).
//     The device keeps running (the driver would often reset).
//   - WAIT_CS per sequence number with the driver's table: EBUSY while the
//     device is not operational, COMPLETED (+TIMESTAMP_VLD), beyond the
//     slot window (and for seq 0) the outcome stored for a TIMESTAMP CS
//     (256 kept, popped once) or else COMPLETED+GONE, BUSY when timeout_us
//     elapses (0 polls; values wrap at 32 bits like usecs_to_jiffies;
//     MAX_SCHEDULE_TIMEOUT waits without limit), -ETIMEDOUT+TIMEDOUT,
//     -EIO+ABORTED, EINVAL for an unsubmitted seq. MULTI_CS and interrupt
//     waits are not emulated (EPERM where the ASIC lacks them, EOPNOTSUPP
//     otherwise).
//   - TDR: a CS in flight after Config.CSTimeout (or its custom timeout)
//     goes through the driver's conditional reset (reset.go, RULES.md R
//     rows): release watchdog and forced -EIO fences with an eventfd, a
//     hard reset and a kill of the holder without; SKIP_RESET_ON_TIMEOUT
//     and Config.NoResetOnLockup as the driver has them.
//   - Exclusive open (EBUSY), device close (ENODEV on later ioctls), the
//     status seen during a reset (IN_RESET; Open returns EAGAIN, CS, WAIT_CS,
//     CB and MEMORY EBUSY) and in MALFUNCTION/NEEDS_RESET (Open EPERM).
//   - Fault injection: DelayNextCS, HangNextCS, AbortNextCS, Reset,
//     ForceStatus.
//   - Gaudi3 (gaudi3.go, RULES.md G and W11-W16 rows): HW_IP_INFO with the
//     user PDMA channel mask and the user interrupt range; no user queue
//     for the CS ioctl; MAP_BLOCK of the CH_A blocks of user-owned PDMA
//     channels and their mmap, backed by emulated register files whose
//     worker runs the submission ring (LIN_PDMA, NOP) when MSQ_PI moves,
//     advances the completion counter in memory and raises the user
//     interrupt; WAIT_CS on a user interrupt (KERNEL_CQ or a user
//     address); the faults per doorbell, a channel error resetting the
//     device conditionally, as a TDR does. The readings of hardware behaviour the sources leave open
//     are marked in RULES.md.
//
// # Address map
//
// Gaudi2: DRAM VAs (DMMU) from dram_base_address 0x1001_0000_0000_0000
// (16 TiB of VA), host VAs (PMMU) from 0xFFF0_0000_0000_0000 (4 KiB pages)
// and 0xFFF0_8000_0000_0000 (2 MiB pages). Gaudi1: physical DRAM
// [0x6_2000_0000, +dram_size), host VAs from 2^48 (4 KiB) and 2^48+2^47
// (2 MiB). SRAM (both, physical, reachable by LIN_DMA): 0x7F_F000_0000,
// 24 MiB (Gaudi1) or 48 MiB (Gaudi2). Page tables are sorted,
// non-overlapping ranges per VA space, searched by binary search; a DMA
// range is translated piece by piece and fails if any byte is unmapped.
// VAs are handed out next-fit, so a freed VA is not reused at once (stale
// device addresses fault instead of aliasing new memory).
//
// # Memory and DMA-BUF
//
// Gaudi2 DRAM: every ALLOC gets its own sparse memfd, mapped shared into
// the emulator; the DMMU translates to that mapping. An export is a new
// open file description (via /proc/self/fd, with the access mode and
// O_CLOEXEC of the export's flags) of that memfd, returned as a real fd:
// the emulated dma-buf holds the whole allocation, file offset k being
// allocation byte k, whatever {offset, size} window was exported. Where a
// real importer's dma-buf starts is Device.DMABufView: allocation byte
// offset from 6.7, byte 0 on 6.3-6.6 (the offset bug), byte 0 of the
// whole allocation on 6.1; DMABufView.ReadAt reads as an importer would.
// Gaudi1 DRAM is one sparse memfd arena for the device (it outlives
// contexts, like physical DRAM); its exports are opens of the arena, file
// offset k being physical address dram_base_address+k (the view starts at
// the exported address).
// Production code never maps these fds (the driver has no mmap op); tests
// may, to check aliasing. Exported fds belong to the caller and stay
// valid after the context and the device are closed.
//
// Export pinning: the driver refuses UNMAP of a VA (and FREE of a handle)
// while a dma-buf exported from it lives. The emulator cannot see an fd
// close, so it asks the kernel: a write lease on the emulator's private
// O_RDWR reopen of the memfd is granted only when no other open file
// description exists (no exported fd, dup, fd passed to another process,
// or mmap of one). UNMAP/FREE therefore fail with EINVAL exactly while an
// export is alive. The granularity is the allocation: an allocation
// mapped twice and exported from both VAs unpins both VAs only when all
// its exports are gone. If leases are unavailable (fs.leases-enable=0),
// an export pins until the context closes.
//
// Kernel CBs are emulator-owned shared anonymous memory, and a Gaudi3
// block's registers an emulator-owned register file; Mmap returns a
// mapping of their pages of its own, so that a Munmap (of part of a
// mapping, or of a range over several: RULES.md B10) removes the user's
// pages only, a touch of them faulting as on hardware, while the CB and
// the registers stay the emulator's. A mapping is usable only while its
// context is open: Close unmaps it, as the real backend's Close does; a
// Device.Close leaves the user's mappings of CBs and Gaudi3 blocks in
// place until Munmap or the context's Close, as the driver's mappings
// hold their own references (RULES.md D12).
//
// # Reset and close
//
// A TDR or Reset is the driver's conditional reset (reset.go). With an
// eventfd registered the context is notified, every fence in flight
// completes -EIO while the engines run on, WAIT_CS answers EBUSY and the
// device stays OPERATIONAL until the context is released (a hard reset)
// or Config.ReleaseWatchdog ends (a hard reset and a kill). Without one
// the hard reset comes at once: IN_RESET, engines halted, CSs rolled back
// (-EIO, ABORTED; -ETIMEDOUT, TIMEDOUT for the CS that timed out), the
// holding process killed 1 s later (Config.Kill; by default a real
// SIGKILL), the device OPERATIONAL again once the context is closed.
// Closing the context, or the device, aborts in-flight CSs the same way,
// wakes blocked WAIT_CS calls, stops every goroutine (engines, TDR and
// delay timers) and releases every fd, mapping and CB of the context (but
// the user's mmaps a Device.Close leaves: D12); nothing waits on user
// memory. Close is synchronous: Open answers EAGAIN
// only while a Close or a hard reset is in progress. With
// Config.HeldExports a Close that finds one of the context's DMA-BUF
// exports still open does not release it (the driver's export holds the
// fd's file): the context lives on, Open answers EBUSY, the release
// watchdog still ends in a hard reset and a kill, and the release comes
// once the last export is gone (held.go, RULES.md R12).
//
// # Not modeled
//
// Timing of real DMA engines (an emulated copy runs at memcpy speed; Stats
// reports the busy time, summed over engines in DMABusy and as wall time
// with any engine executing in DMAActive), internal and compute queues (their CSs pass the
// driver's checks, then EOPNOTSUPP), queue-full EAGAIN, sync objects and
// monitors, Gaudi1/2 user interrupts, MSG/WREG packets, the ARC scheduler mode,
// multi-CS waits, context switch (restore chunks), the control node,
// Gaudi3's ARC scheduler mode and its blocks other than the PDMA CH_A
// blocks, the release delay after close (Gaudi2 resets on release; here
// a reopen after Close succeeds at once), the SHARED and CONTIGUOUS ALLOC
// flags (accepted, no effect) and the writability check of pinned host
// pages.
package hlsim
