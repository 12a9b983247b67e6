package engine

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/handshake"
	"github.com/gxfer/gxfer/queue"
)

// TestConfigBounds: New refuses an absurd Config value with ErrInvalid,
// naming the field, the value and the limit, instead of crashing,
// hanging or failing every later operation. Before the bounds:
// QueueDepth 1<<40 ended the process in make(chan) ("fatal error:
// runtime: out of memory": the test binary died, nothing to assert) and
// math.MaxInt panicked ("makechan: size out of range").
func TestConfigBounds(t *testing.T) {
	emulated := func(c Config) Config {
		c.Devices, c.Emulator.DRAMSize = DevicesEmulated, 64<<20
		return c
	}
	tests := []struct {
		name  string
		cfg   Config
		field string // in the message, with the value and the limit
		value string
		limit int64
	}{
		{"QueueDepth 1<<40", emulated(Config{QueueDepth: 1 << 40}), "Config.QueueDepth", "1099511627776", queue.MaxCapacity},
		{"QueueDepth MaxInt", emulated(Config{QueueDepth: math.MaxInt}), "Config.QueueDepth", strconv.Itoa(math.MaxInt), queue.MaxCapacity},
		{"Workers 1<<40", Config{Devices: DevicesNone, Workers: 1 << 40}, "Config.Workers", "1099511627776", math.MaxInt32},
		{"Workers MaxInt32+1", Config{Devices: DevicesNone, Workers: math.MaxInt32 + 1}, "Config.Workers", "2147483648", math.MaxInt32},
		{"EmulatedCount 1<<20", Config{Devices: DevicesEmulated, EmulatedCount: 1 << 20}, "Config.EmulatedCount", "1048576", maxEmulatedCount},
		{"EmulatedCount MaxInt", Config{Devices: DevicesEmulated, EmulatedCount: math.MaxInt}, "Config.EmulatedCount", strconv.Itoa(math.MaxInt), maxEmulatedCount},
		{"DRAMSize MaxUint64", Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: math.MaxUint64}}, "Config.Emulator.DRAMSize", "18446744073709551615", hlsim.MaxDRAMSize},
		{"DRAMSize over by one", Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: hlsim.MaxDRAMSize + 1}}, "Config.Emulator.DRAMSize", strconv.Itoa(hlsim.MaxDRAMSize + 1), hlsim.MaxDRAMSize},
		{"DRAMSize under a page", Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: 1}}, "Config.Emulator.DRAMSize", "1", hlsim.DefaultDRAMPageSize},
		{"DRAMSize under a Gaudi3 page", Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{Model: "gaudi3", DRAMSize: hlsim.Gaudi3DRAMPageSize - 4096}}, "Config.Emulator.DRAMSize", strconv.Itoa(hlsim.Gaudi3DRAMPageSize - 4096), hlsim.Gaudi3DRAMPageSize},
		{"CBSize MaxInt", Config{Devices: DevicesNone, CBSize: math.MaxInt}, "Config.CBSize", strconv.Itoa(math.MaxInt), dma.MaxCBSize},
		{"CBSize over by one", emulated(Config{CBSize: dma.MaxCBSize + 1}), "Config.CBSize", strconv.Itoa(dma.MaxCBSize + 1), dma.MaxCBSize},
		{"CBSize below a copy packet", emulated(Config{CBSize: 3}), "Config.CBSize", "3", int64(dma.LinDMASize + dma.NOPSize)},
		{"CBSize above Gaudi3's", emulated(Config{CBSize: dma.MaxCBSize, Emulator: EmulatorConfig{Model: "gaudi3"}}), "Config.CBSize", strconv.Itoa(dma.MaxCBSize), int64(gaudi3MaxCB)},
		{"TCPLanes 1<<20", Config{Devices: DevicesNone, TCPLanes: 1 << 20}, "Config.TCPLanes", "1048576", maxTCPLanes},
		{"TCPLanes over by one", Config{Devices: DevicesNone, TCPLanes: maxTCPLanes + 1}, "Config.TCPLanes", strconv.Itoa(maxTCPLanes + 1), maxTCPLanes},
		{"MaxPeersPerSource over MaxPeers", Config{Devices: DevicesNone, MaxPeers: 100, MaxPeersPerSource: 101}, "Config.MaxPeersPerSource", "101", 100},
		{"MaxPeersPerSource over the default MaxPeers", Config{Devices: DevicesNone, MaxPeersPerSource: 1025}, "Config.MaxPeersPerSource", "1025", 1024},
		{"MaxPendingPerSource over by one", Config{Devices: DevicesNone, MaxPendingPerSource: handshake.MaxPending + 1}, "Config.MaxPendingPerSource", strconv.Itoa(handshake.MaxPending + 1), handshake.MaxPending},
		{"RDMA.Port 256", Config{Devices: DevicesNone, RDMA: RDMAConfig{Port: 256}}, "Config.RDMA.Port", "256", math.MaxUint8},
		{"RDMA.Port -1", Config{Devices: DevicesNone, RDMA: RDMAConfig{Port: -1}}, "Config.RDMA.Port", "-1", 0},
		{"RDMA.GIDIndex 256", Config{Devices: DevicesNone, RDMA: RDMAConfig{GIDIndex: 256}}, "Config.RDMA.GIDIndex", "256", math.MaxUint8},
		{"RDMA.GIDIndex MinInt", Config{Devices: DevicesNone, RDMA: RDMAConfig{GIDIndex: math.MinInt}}, "Config.RDMA.GIDIndex", strconv.Itoa(math.MinInt), 0},
		{"QueueDepth over by one", Config{Devices: DevicesNone, QueueDepth: queue.MaxCapacity + 1}, "Config.QueueDepth", strconv.Itoa(queue.MaxCapacity + 1), queue.MaxCapacity},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := New(tt.cfg)
			if err == nil {
				require.NoError(t, e.Close())
				t.Fatalf("New accepted %s %s", tt.field, tt.value)
			}
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, tt.field+" "+tt.value)
			require.ErrorContains(t, err, strconv.FormatInt(tt.limit, 10))
		})
	}
}

// gaudi3MaxCB is the largest command buffer Gaudi3's direct mode takes.
var _, gaudi3MaxCB = dma.ModelGaudi3.CBSizeRange()

// TestConfigAtBounds: the largest value each bound admits works: New,
// a copy from host memory to each device (if any) and back, Close.
func TestConfigAtBounds(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"QueueDepth", Config{Devices: DevicesNone, QueueDepth: queue.MaxCapacity}},
		{"Workers", Config{Devices: DevicesNone, Workers: math.MaxInt32}},
		{"DRAMSize max", Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: hlsim.MaxDRAMSize}}},
		{"DRAMSize one page", Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: hlsim.DefaultDRAMPageSize}}},
		{"DRAMSize one Gaudi3 page", Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{Model: "gaudi3", DRAMSize: hlsim.Gaudi3DRAMPageSize}}},
		{"CBSize max", Config{Devices: DevicesEmulated, CBSize: dma.MaxCBSize, Emulator: EmulatorConfig{DRAMSize: 64 << 20}}},
		{"CBSize Gaudi3 max", Config{Devices: DevicesEmulated, CBSize: gaudi3MaxCB, Emulator: EmulatorConfig{Model: "gaudi3", DRAMSize: 64 << 20}}},
		{"TCPLanes", Config{Devices: DevicesNone, TCPLanes: maxTCPLanes}},
		{"MaxPendingPerSource", Config{Devices: DevicesNone, MaxPendingPerSource: handshake.MaxPending}},
		{"MaxPeersPerSource", Config{Devices: DevicesNone, MaxPeers: 100, MaxPeersPerSource: 100}},
		{"RDMA.Port and GIDIndex", Config{Devices: DevicesNone, RDMA: RDMAConfig{Port: math.MaxUint8, GIDIndex: math.MaxUint8}}},
		{"EmulatedCount", Config{Devices: DevicesEmulated, EmulatedCount: maxEmulatedCount, Emulator: EmulatorConfig{DRAMSize: 64 << 20}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := New(tt.cfg)
			require.NoError(t, err)
			defer func() { require.NoError(t, e.Close()) }()
			ctx := context.Background()
			h, err := e.Alloc(1<<20, Host)
			require.NoError(t, err)
			for i := range e.NumDevices() {
				d, err := e.Alloc(1<<20, Gaudi(i))
				require.NoError(t, err)
				require.NoError(t, e.CopySync(ctx, d.All(), h.All()))
				require.NoError(t, e.CopySync(ctx, h.All(), d.All()))
			}
		})
	}
}

// TestCloseGraceMax: a CloseGrace as long as a Duration holds means
// Close waits for a worker still running a copy. Before, Close added a
// second to it for the worker pool's release, which overflowed to a
// negative timeout: Close gave up on the workers at once ("workers did
// not stop in time") and went on releasing while one still ran a copy.
func TestCloseGraceMax(t *testing.T) {
	e, err := New(Config{Devices: DevicesNone, CloseGrace: math.MaxInt64})
	require.NoError(t, err)
	src, err := e.Alloc(1<<20, Host) // above InlineHostMax: a host worker copies it
	require.NoError(t, err)
	dst, err := e.Alloc(1<<20, Host)
	require.NoError(t, err)
	entered, release := blockFirstProcess(e)
	f := e.Copy(context.Background(), dst.All(), src.All())
	<-entered
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case err := <-closed:
		close(release)
		<-f.Done()
		t.Fatalf("Close returned (%v) while a worker still held a copy", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	require.NoError(t, <-closed)
	<-f.Done()
	// It had not started when Close began (the hook runs first).
	require.ErrorIs(t, f.Err(), ErrClosed)
}

// TestConfigPeerIdleEvict: New refuses a Config.PeerIdleEvict below 10 ms
// (a listener would wake every 2.5 ms or more often, and close endpoints
// between two requests) with ErrInvalid naming the field, the value and
// the minimum; it takes the minimum, any longer one, a negative one
// (never) and 0 (the 60 s default), and a listener opens and closes with
// each.
func TestConfigPeerIdleEvict(t *testing.T) {
	tests := []struct {
		name string
		in   time.Duration
		want time.Duration // the engine's, 0: refused
	}{
		{"1ns", 1, 0},
		{"just below the minimum", minPeerIdleEvict - 1, 0},
		{"minimum", minPeerIdleEvict, minPeerIdleEvict},
		{"default", 0, 60 * time.Second},
		{"never", -1, -1},
		{"MaxInt64", math.MaxInt64, math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := New(Config{Devices: DevicesNone, PeerIdleEvict: tt.in})
			if tt.want == 0 {
				if err == nil {
					require.NoError(t, e.Close())
					t.Fatalf("New accepted PeerIdleEvict %v", tt.in)
				}
				require.ErrorIs(t, err, ErrInvalid)
				require.ErrorContains(t, err, "Config.PeerIdleEvict "+tt.in.String())
				require.ErrorContains(t, err, minPeerIdleEvict.String())
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, e.cfg.PeerIdleEvict)
			l, err := e.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			require.NoError(t, l.Close())
			require.NoError(t, e.Close())
		})
	}
}
