// Package dma drives an Intel Gaudi device for data movement: discovery,
// exclusive open, device memory, host memory mapping, DMA-BUF export,
// LIN_DMA command buffers, command submission and completion.
//
// Everything goes through internal/hlsys, so a Device works the same on a
// real node (/dev/accel/accelN on kernels >= 6.7, /dev/hlN before) and on
// the emulator in package dma/hlsim, which reports itself as emulated
// (Device.Emulated, and "(emulated)" in Device.Name).
//
// # Flow
//
//	nodes, _ := dma.Discover("")                  // sysfs: habanalabs nodes only
//	dev, _ := dma.Open(nodes[0], dma.Options{})   // one compute context per device
//	defer dev.Close()                             // releases everything still live
//	mem, _ := dev.AllocDevice(n)                  // Gaudi2: ALLOC + MAP -> device VA (or carved from one)
//	buf, _ := dma.AllocHostPages(n)               // pinned-to-be host memory off the Go heap
//	hm, _ := dev.MapHostBytes(buf)                // USERPTR MAP -> device VA of the host buffer
//	_ = dev.CopySync(mem.Addr(), hm.DeviceAddr(), n)
//
// For asynchronous use build a command submission with a CSBuilder
// (NewCSBuilder over a direction's queues; AddCopy while Fits; Seal, which
// adds what the model needs at the end of each command buffer), Submit its
// chunks, Wait (or poll with WaitCS) on the sequence number, then Release
// the command buffers, e.g. to a CBPool. CopySync is one such CS, waited
// for. CBs can also be filled by hand (NewCB, AddLinDMA, AddNOP, Chunk).
//
// # Models
//
// Gaudi (Gaudi1) has no MMU in front of DRAM: DeviceMem addresses are
// physical, carved from [dram_base_address, +dram_size) by this package
// (first fit, 4 KiB granularity) with ALLOC/FREE issued for the driver's
// accounting only. Its external DMA queues (DMA_0_x host-to-device,
// DMA_1_x device-to-host) take kernel command buffers (CB CREATE + mmap),
// and its LIN_DMA packets need the lin and RB bits.
//
// Gaudi2 maps DRAM through the device MMU: ALLOC (rounded to the DRAM page
// size) returns a handle, MAP a device VA; memory is unmapped before it is
// freed. The page is large (768 MiB with six HBMs), so on kernels 6.7+ a
// smaller AllocDevice is carved from a shared allocation (slab.go). Its queues take user command buffers, which live in host pages
// mapped with USERPTR. Of the PCI DMA queues the driver opens only
// PDMA_0_0, PDMA_0_1 and PDMA_1_0 (ids 0, 1, 4) to users; the others belong
// to the ARC firmware and a CS on them fails with EINVAL. Host-to-device
// and device-to-device copies go to PDMA_0_0/PDMA_0_1, device-to-host
// copies to PDMA_1_0 (the table and the driver citations are in model.go).
//
// Gaudi3 needs Intel's out-of-tree driver. Memory is handled like Gaudi2,
// but the driver opens no command queue to users, so copies run in direct
// PDMA mode (gaudi3.go, docs/gaudi3.md): the Device maps the CH_A register
// blocks of user-owned PDMA channels (MAP_BLOCK), gives each a submission
// ring in host memory and a completion counter in a mapped kernel CB, and
// behind the same API the "queues" are channel numbers, a CB holds
// LIN_PDMA packets, Submit copies them into the rings and stores MSQ_PI,
// and Wait compares the counters with the submission's targets, sleeping
// in WAIT_CS on the channel's user interrupt. The Device applies its own
// TDR (Options.CSTimeout), since the driver sees none of this work. Attach
// never touches a channel.
//
// # Device resets
//
// When the driver resets the device (a CS past its timeout, a fatal
// device error) it kills the process holding the fd unless the fd is
// released within its 30 s release watchdog. A Device registers an
// eventfd for the driver's events and, on DEVICE_RESET, releases its
// context at once: everything in flight and every later call fails with
// ErrDeviceReset, and a new Device (Open) is a new context (reset.go has
// the driver's rules).
//
// # DMA-BUF
//
// Two kernel APIs exist and Device.ExportAPI says which one is used: the
// 6.1 form exports a whole Gaudi2 allocation by handle (or a Gaudi1
// physical range), the 6.3+ form takes the exact device VA plus a
// page-aligned offset. Drivers before 6.7 validate that offset but ignore
// it when they build the DMA-BUF, so on 6.3-6.6 (legacy numbering) gxfer
// never passes one: it exports from the start of the allocation and
// carries the offset itself (Device.ExportOffsetHonored). Sizes are
// rounded up to whole pages, as newer drivers require. A DMABuf reports
// where the wanted range sits in it (Offset, Len: what an importer such as
// ibv_reg_dmabuf_mr must be given) and which part of the allocation it
// exposes (MemOffset, Size). A DMABuf keeps its DeviceMem from being
// freed. The exporter has no mmap: DMA-BUF fds are for NICs and other
// processes, never for the CPU.
//
// # Concurrency and lifetime
//
// A Device may be used from many goroutines. Tracking state is guarded by
// a mutex that is never held across an ioctl; a read-write gate lets Close
// wait for calls in progress (including Wait) and then release, in reverse
// order of creation, every DMA-BUF, CB, host mapping and allocation still
// live before it closes the backend. Release methods (Free, Unmap, Close)
// are idempotent. A CB belongs to one goroutine at a time.
//
// # Errors
//
// Errors are *Error values that wrap a sentinel (ErrInvalid, ErrNoMemory,
// ErrDeviceBusy, ErrCSTimedOut, ...) and the driver binding's error, so
// both errors.Is(err, dma.ErrNoMemory) and errors.Is(err, unix.ENOMEM)
// work.
package dma
