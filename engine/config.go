package engine

import (
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/copier"
	"github.com/gxfer/gxfer/internal/handshake"
	"github.com/gxfer/gxfer/queue"
	"github.com/rs/zerolog"
)

// DeviceMode says which Gaudi devices New opens.
type DeviceMode uint8

const (
	// DevicesAuto opens every Gaudi found, or EmulatedCount emulated ones
	// when none is found. The default.
	DevicesAuto DeviceMode = iota
	// DevicesEmulated opens EmulatedCount emulated devices only.
	DevicesEmulated
	// DevicesNone opens no device: host memory only.
	DevicesNone
)

// QueueFullMode says what a submission does when its queue is full.
type QueueFullMode uint8

const (
	// WaitForRoom waits until there is room or the context ends.
	WaitForRoom QueueFullMode = iota
	// FailWhenFull fails the submission at once with ErrQueueFull.
	FailWhenFull
)

// EmulatorConfig configures emulated devices (package dma/hlsim). On the
// gaudi3 model copies run in direct PDMA mode (package dma); CSTimeout is
// then applied by the device path, which resets the timed-out
// submission's PDMA channels rather than the device.
type EmulatorConfig struct {
	Model     string        // "gaudi2" (default), "gaudi1" or "gaudi3"
	DRAMSize  uint64        // default 4 GiB (sparse); from one DRAM page (2 MiB; gaudi3: 32 MiB, the driver's) to hlsim.MaxDRAMSize (256 GiB): New refuses others with ErrInvalid
	Kernel    string        // emulated uAPI generation, default "6.8"
	CSTimeout time.Duration // emulated TDR, default 30 s
}

// RegCacheConfig configures the registration caches.
type RegCacheConfig struct {
	Disabled   bool   // register and deregister around every operation (RegCache only; IPCCache refuses it)
	MaxRegions int    // 0: unlimited
	MaxBytes   uint64 // 0: unlimited
}

// Config configures an Engine. The zero value is usable.
type Config struct {
	// Logger receives the engine's logs; default zerolog.Nop().
	Logger zerolog.Logger

	// Devices says which Gaudi devices to open (default DevicesAuto).
	Devices       DeviceMode
	EmulatedCount int            // emulated devices to open (default 1, at most 256: New refuses more with ErrInvalid)
	Emulator      EmulatorConfig // the emulated devices' model and limits
	SysRoot       string         // root of /sys and /dev for discovery (tests); default "/"

	// QueueDepth is the capacity of each (device, direction) queue and
	// of the host copies' queue: default 4096, at most queue.MaxCapacity
	// (1<<20; New refuses more with ErrInvalid). Every queue is
	// allocated whole by New, and a deeper one holds seconds of a
	// device's work: it only delays backpressure.
	QueueDepth int
	QueueFull  QueueFullMode // default WaitForRoom
	// Workers is the worker pool's size: default 4*GOMAXPROCS + 8 (at
	// least 3 per device + 1), at most math.MaxInt32 (New refuses more
	// with ErrInvalid: the pool keeps its size in an int32).
	Workers int

	// OpTimeout, if set, is the default deadline of every operation.
	OpTimeout time.Duration

	InlineHostMax   int // host copies up to this size run in the caller; default 64 KiB
	ParallelCopyMin int // host copies from this size are split across cores; default 4 MiB
	// CopyWorkers bounds the cores one large host copy (an engine copy or
	// a put into a peer's memory over unix) is split over: default
	// GOMAXPROCS; 1: never split.
	CopyWorkers int
	// CopyNTMin is the size from which host copies use non-temporal
	// stores (bypassing the caches): default a quarter of one CPU's share
	// of the last-level cache, from sysfs (internal/memcopy,
	// docs/copy-kernels.md); negative: never.
	CopyNTMin int
	// CBSize is the command buffer size: default 64 KiB, at most
	// dma.MaxCBSize (the driver's limit, 2 MiB - 32) and within the range
	// of every device's model (dma.Model.CBSizeRange: at least one copy
	// packet and its seal, on Gaudi3 at most 512 KiB). New refuses
	// others with ErrInvalid.
	CBSize      int
	MaxOpsPerCS int    // copies coalesced into one CS; default 1024 (a batch's first CS carries at most 32, each next one twice as many, so the device starts early)
	ChunkSize   uint64 // device copies are split in chunks of this size over the DMA queues; default 4 MiB

	PollSpin   time.Duration // CQ actor spin window after its last progress, also with nothing outstanding (then polling for submissions); default 50 us (negative: none)
	WaitSpin   time.Duration // Future.Wait spin before blocking, and a unix endpoint's Recv polling its message ring; default 20 us
	CloseGrace time.Duration // how long Close lets in-flight work finish; default 2 s (any longer one, up to the largest Duration, is honoured)

	// Transport is what Dial("tcp", ...) uses unless WithTransport says
	// otherwise: TransportAuto (default: RDMA when both sides have a usable
	// device, else TCP), TransportTCP or TransportRDMA.
	Transport TransportKind
	// PeerTimeout is how long a peer may stay silent (no frame, not even
	// a heartbeat: every endpoint sends one each PeerTimeout/4) before its
	// endpoint fails and its operations end with ErrPeer. Default 10 s;
	// negative: never.
	PeerTimeout time.Duration
	// RDMA selects the RDMA device endpoints use (or disables RDMA).
	RDMA RDMAConfig
	// TCPReadSpin is how long a TCP endpoint's reader polls its socket
	// (yielding between polls) for the next frame before parking in the
	// netpoller, when it waits for a small read: a peer's answer within
	// the window is taken without a sleeping thread's wakeup (8 B put
	// latency over veth here: 75 us parked, 10 us spinning). Default
	// 50 us; negative: never spin.
	TCPReadSpin time.Duration
	// TCPLanes is the number of connections a TCP endpoint Dial opens;
	// transfers of 4 MiB and more are split over them (default 2; 1: one
	// connection; at most 64: New refuses more with ErrInvalid). An extra
	// connection that cannot be opened, or fails before the Dial has
	// made its endpoint, is logged and done without; one failing later
	// fails its endpoint (transfers may be on it), with the failure's
	// error.
	TCPLanes int

	// ClusterSecret, when set (at least 16 bytes, the same on every
	// engine of the cluster), makes TCP endpoints mutually authenticated:
	// a listener refuses dialers that cannot prove they hold it, and a
	// dialer refuses a listener that cannot (an HMAC challenge-response in
	// the handshake, see wire.Auth; such failures match
	// ErrUnauthenticated). It authenticates, it does not encrypt. Off by
	// default (nil): the embedded single-node case needs none, and unix
	// sockets are checked by the kernel (same uid) either way. New keeps
	// a copy.
	ClusterSecret []byte
	// MaxPeers bounds the endpoints each Listener serves (default 1024).
	// At the bound, a new peer makes the listener close an endpoint that
	// never carried a request (a connection that said Hello and then only
	// heartbeats, and that this side did not use either) and that has
	// nothing in flight: the oldest of the source (see
	// MaxPendingPerSource) holding the most endpoints, so that one host
	// opening endpoints in a loop closes its own; else one idle for
	// longer than PeerIdleEvict; if there is none, the new peer is
	// refused and its Dial fails with ErrTooManyPeers.
	MaxPeers int
	// MaxPeersPerSource bounds the endpoints each Listener serves from
	// one source (see MaxPendingPerSource), each of their TCP lanes
	// counted: at the bound, the source's new peer closes its own oldest
	// idle endpoint (see MaxPeers), or is refused (ErrTooManyPeers) if
	// all of them are busy, so that no host can take every slot while
	// other hosts still get in. Default MaxPeers/4 but at least 64 (a
	// host's worker processes each dial: 8 of them with 4 connections
	// each, say, or one endpoint of the most TCPLanes), at most MaxPeers
	// (New refuses more with ErrInvalid). Hosts behind one NAT address are one
	// source: raise it for them.
	MaxPeersPerSource int
	// MaxPendingPerSource bounds the handshakes in progress at each
	// Listener from one source: a TCP peer's IP address (an IPv6 one's
	// /64), a unix peer's pid. A listener holds 64 handshakes in progress
	// (a new connection beyond evicts one); a source beyond its share
	// evicts its own oldest, and at 64 the source holding the most loses
	// its oldest, so that one source's flood of connections cannot evict
	// other peers' handshakes. Default 16; at most 64 (New refuses more
	// with ErrInvalid).
	MaxPendingPerSource int
	// PeerIdleEvict: at MaxPeers (or MaxPeersPerSource), once no endpoint
	// that never made a request is left to close, a listener closes an
	// endpoint that made requests but has had no traffic (the peer's
	// requests, their data, messages, and this side's Puts, Gets and
	// messages on it; heartbeats do not count) for longer than this, with
	// nothing in flight (a request of the peer's being served, a copy into
	// local memory, a request of this side's waiting for its reply; nor
	// on its TCP lanes): the one idle the longest, of the source holding
	// the most endpoints. Its peer's next use fails with ErrPeer. Idle
	// time is noted each PeerIdleEvict/4, so an endpoint is closed after
	// between 1 and 1.25 times this. A peer's Puts and Gets that send no
	// frame (one-sided RDMA into this side's memory, unix Puts and Gets
	// through its mapping of it, a binding's) are reported with its next
	// heartbeat, on every transport (each PeerTimeout/4; none when its
	// PeerTimeout is negative; from an engine of before wire.CapUseReport
	// only on a unix socket with message rings, and its RDMA use is
	// then unseen): keep this well above the peers' heartbeat interval
	// (PeerTimeout/4, 2.5 s by default), or a peer using the endpoint
	// only through such Puts is closed between two reports. Default
	// 60 s; at least 10 ms (New
	// refuses less with ErrInvalid); negative: never (an endpoint that
	// has carried one request is never closed to make room, and sources
	// that keep MaxPeers such endpoints lock newcomers out).
	PeerIdleEvict time.Duration

	// RegCache bounds the caches of host memory mapped into the devices'
	// MMUs (one per device).
	RegCache RegCacheConfig
	// IPCCache bounds the peers' buffers mapped into this process (the IPC
	// handle cache); 0 means the ipc package defaults. The IPC handle
	// cache cannot be disabled: New refuses Disabled with ErrInvalid. A
	// peer's allocation larger than MaxBytes is not mapped: its owner
	// performs the Puts and Gets on it, and a Binding to it is refused
	// (ErrNotSupported).
	IPCCache RegCacheConfig
}

func (c Config) withDefaults() Config {
	if c.EmulatedCount <= 0 {
		c.EmulatedCount = 1
	}
	if c.Emulator.Model == "" {
		c.Emulator.Model = "gaudi2"
	}
	if c.QueueDepth <= 0 {
		c.QueueDepth = 4096
	}
	if c.Workers <= 0 {
		c.Workers = 4*runtime.GOMAXPROCS(0) + 8
	}
	if c.InlineHostMax == 0 {
		c.InlineHostMax = 64 << 10
	}
	if c.ParallelCopyMin <= 0 {
		c.ParallelCopyMin = 4 << 20
	}
	if c.CBSize <= 0 {
		c.CBSize = 64 << 10
	}
	if c.MaxOpsPerCS <= 0 {
		c.MaxOpsPerCS = 1024
	}
	if c.ChunkSize == 0 {
		c.ChunkSize = 4 << 20
	}
	c.ChunkSize = min(c.ChunkSize, dma.MaxLinDMASize)
	if c.WaitSpin == 0 {
		c.WaitSpin = 20 * time.Microsecond
	}
	if c.TCPReadSpin == 0 {
		c.TCPReadSpin = 50 * time.Microsecond
	}
	if c.TCPLanes <= 0 {
		c.TCPLanes = 2
	}
	if c.PeerTimeout == 0 {
		c.PeerTimeout = 10 * time.Second
	}
	if c.MaxPeers <= 0 {
		c.MaxPeers = 1024
	}
	if c.MaxPendingPerSource <= 0 {
		c.MaxPendingPerSource = handshake.DefaultMaxPendingPerSource
	}
	if c.MaxPeersPerSource <= 0 {
		c.MaxPeersPerSource = handshake.DefaultMaxPeersPerSource(c.MaxPeers)
	}
	if c.CloseGrace <= 0 {
		c.CloseGrace = 2 * time.Second
	}
	if c.PeerIdleEvict == 0 {
		c.PeerIdleEvict = defaultPeerIdleEvict
	}
	return c
}

// defaultPeerIdleEvict is Config.PeerIdleEvict's default: far longer
// than the gap between the requests of a peer that is moving data, and
// short enough that a host's endpoints left idle do not hold the slots
// long.
const defaultPeerIdleEvict = 60 * time.Second

// minPeerIdleEvict bounds Config.PeerIdleEvict from below (see validate).
const minPeerIdleEvict = 10 * time.Millisecond

// maxEmulatedCount bounds Config.EmulatedCount (see validate).
const maxEmulatedCount = 256

// maxTCPLanes bounds Config.TCPLanes (see validate): a listener spares
// no more lanes of a busy endpoint than this allows.
const maxTCPLanes = handshake.MaxLanes

// validate refuses the values of c (defaults applied) that New cannot
// honour: each bound is documented on its field, with why no larger
// value is useful. The error names the field, the value and the limit.
func (c Config) validate() error {
	errs := []error{
		// The queues are channels New allocates whole: 1<<40 ended the
		// process in make ("fatal error: runtime: out of memory"), and
		// package queue clamps to its MaxCapacity (see there why no
		// deeper queue is useful).
		inRange("QueueDepth", c.QueueDepth, 1, queue.MaxCapacity),
		// The ants pool keeps its capacity in an int32: 1<<40 wrapped
		// to 0, a pool that runs nothing (host copies then hung for
		// ever). The pool only runs the queues' drains, one per
		// (device, direction) and one for host copies at a time, so no
		// value near this is ever used.
		inRange("Workers", c.Workers, 1, math.MaxInt32),
		// New opens every emulated device before it returns, each with
		// its emulator, memfd and goroutines: with 1<<20 New was still
		// opening them after 30 s. No machine has more Gaudis than the
		// kernel has device numbers for them: 256 (ACCEL_MAX_MINORS of
		// drivers/accel, and the legacy habanalabs class's
		// HL_MAX_MINORS).
		inRange("EmulatedCount", c.EmulatedCount, 1, maxEmulatedCount),
		// No device takes a larger command buffer than its driver
		// (HL_MAX_CB_SIZE); New checks each device model's own range
		// once it has opened them (checkCBSize). New used to accept any
		// size, and every device copy then failed.
		inRange("CBSize", c.CBSize, 1, dma.MaxCBSize),
		// Every lane is a connection the peer's listener admits as one
		// of its MaxPeers (default 1024) and never evicts while its
		// endpoint lives (handshake.MaxLanes-1 per endpoint at most):
		// 1<<20 lanes had one Dial fill a listener and push its other
		// peers out. Nor do more lanes than cores copy
		// any faster (each lane's reader and writer copy on a core).
		inRange("TCPLanes", c.TCPLanes, 1, maxTCPLanes),
		// A listener holds no more handshakes in progress than this,
		// from all sources together.
		inRange("MaxPendingPerSource", c.MaxPendingPerSource, 1, handshake.MaxPending),
		// A listener serves no more endpoints than this, from all
		// sources together.
		inRange("MaxPeersPerSource", c.MaxPeersPerSource, 1, c.MaxPeers),
		// A listener notes its peers' activity each PeerIdleEvict/4:
		// below 10 ms that is a wake-up every 2.5 ms or more often for
		// as long as the listener is open, and an endpoint between two
		// requests of a peer that is moving data (a round trip, a
		// scheduling delay of a loaded machine) would be closed as idle.
		// Negative: never (not bounded).
		durationAtLeast("PeerIdleEvict", c.PeerIdleEvict, minPeerIdleEvict),
		// Verbs carries both in uint8 fields (port_num, sgid_index): no
		// port outside [1, 255] exists (0 picks one), and a GIDIndex
		// above 255 was truncated (rdma.QP: uint8(GIDIndex)), so the
		// queue pairs used GID 0 while the handshake announced GID
		// 256's address. A Port that matches none of the device's just
		// turns RDMA off (Engine.RDMAInfo says why), as before.
		inRange("RDMA.Port", c.RDMA.Port, 0, math.MaxUint8),
		inRange("RDMA.GIDIndex", c.RDMA.GIDIndex, 0, math.MaxUint8),
	}
	if c.Emulator.DRAMSize != 0 { // 0: the emulator's default
		// The emulator's own limits (hlsim.New refuses the rest, but
		// with an error that is not ErrInvalid): the emulated address
		// map holds at most MaxDRAMSize, and the size is rounded down
		// to whole DRAM pages.
		page := uint64(hlsim.DefaultDRAMPageSize)
		if c.Emulator.Model == "gaudi3" {
			page = hlsim.Gaudi3DRAMPageSize
		}
		errs = append(errs, inRange("Emulator.DRAMSize", c.Emulator.DRAMSize, page, hlsim.MaxDRAMSize))
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// inRange is nil when lo <= v <= hi, else the ErrInvalid error of
// Config.field.
func inRange[T int | uint64](field string, v, lo, hi T) error {
	switch {
	case v > hi:
		return newErr(ErrInvalid, fmt.Sprintf("Config.%s %d above the limit %d", field, v, hi), nil)
	case v < lo:
		return newErr(ErrInvalid, fmt.Sprintf("Config.%s %d below the minimum %d", field, v, lo), nil)
	}
	return nil
}

// durationAtLeast is nil when d is negative (off) or at least lo, else
// the ErrInvalid error of Config.field.
func durationAtLeast(field string, d, lo time.Duration) error {
	if d >= 0 && d < lo {
		return newErr(ErrInvalid, fmt.Sprintf("Config.%s %v below the minimum %v", field, d, lo), nil)
	}
	return nil
}

// checkCBSize refuses a Config.CBSize that one of the devices' models
// does not take (dma.Model.CBSizeRange): every copy on it would fail.
func checkCBSize(n int, devs []*copier.Device) error {
	for _, g := range devs {
		if lo, hi := g.Dev.Model().CBSizeRange(); n < lo || n > hi {
			return newErr(ErrInvalid, fmt.Sprintf("Config.CBSize %d not in [%d, %d], the range of gaudi%d (%s)", n, lo, hi, g.Idx, g.Dev.Model()), nil)
		}
	}
	return nil
}
