package dma

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

func TestModelFromDeviceID(t *testing.T) {
	for id, want := range map[uint32]Model{
		0x1000: ModelGaudi1, 0x1010: ModelGaudi1, 0x1001: ModelGaudi1,
		0x1020: ModelGaudi2, 0x1021: ModelGaudi2,
		0x1060: ModelGaudi3,
	} {
		m, err := ModelFromDeviceID(id)
		require.NoError(t, err, "%#x", id)
		require.Equal(t, want, m, "%#x", id)
	}
	for _, id := range []uint32{0x0001, 0, 5, 0x1030} {
		_, err := ModelFromDeviceID(id)
		require.ErrorIs(t, err, ErrUnsupportedDevice, "%#x", id)
	}
	require.Equal(t, "Gaudi", ModelGaudi1.String())
	require.Equal(t, "Gaudi2", ModelGaudi2.String())
	require.Equal(t, "Gaudi3", ModelGaudi3.String())
}

// opener returns an open function that fails with errs in turn and then
// returns b (counting calls).
func opener(b hlsys.Backend, calls *int, errs ...error) func() (hlsys.Backend, error) {
	return func() (hlsys.Backend, error) {
		*calls++
		if len(errs) > 0 {
			err := errs[0]
			errs = errs[1:]
			return nil, &hlsys.Error{Op: "open", Node: "/dev/accel/accel7", Errno: err.(unix.Errno)}
		}
		return b, nil
	}
}

func TestOpenErrorMapping(t *testing.T) {
	fast := Options{OpenBackoff: time.Microsecond}

	t.Run("EBUSY", func(t *testing.T) {
		var n int
		_, err := OpenBackend("/dev/accel/accel7", opener(nil, &n, unix.EBUSY), fast)
		require.ErrorIs(t, err, ErrDeviceBusy)
		require.ErrorIs(t, err, unix.EBUSY)
		require.Contains(t, err.Error(), "/dev/accel/accel7")
		require.Contains(t, err.Error(), "another process owns")
		require.Equal(t, 1, n, "EBUSY is not retried")
	})
	t.Run("EAGAIN then success", func(t *testing.T) {
		f := newFake(ModelGaudi2, hlsys.Accel)
		var n int
		d, err := OpenBackend("fake0", opener(f, &n, unix.EAGAIN, unix.EAGAIN), fast)
		require.NoError(t, err)
		require.Equal(t, 3, n)
		require.NoError(t, d.Close())
	})
	t.Run("EAGAIN exhausted", func(t *testing.T) {
		var n int
		opts := fast
		opts.OpenRetries = 3
		errs := []error{unix.EAGAIN, unix.EAGAIN, unix.EAGAIN, unix.EAGAIN, unix.EAGAIN}
		_, err := OpenBackend("/dev/hl3", opener(nil, &n, errs...), opts)
		require.ErrorIs(t, err, ErrDeviceBusy)
		require.ErrorIs(t, err, unix.EAGAIN)
		require.Equal(t, 4, n)
	})
	t.Run("no retries", func(t *testing.T) {
		var n int
		opts := fast
		opts.OpenRetries = -1
		_, err := OpenBackend("/dev/hl3", opener(nil, &n, unix.EAGAIN), opts)
		require.ErrorIs(t, err, ErrDeviceBusy)
		require.Equal(t, 1, n)
	})
	t.Run("EPERM", func(t *testing.T) {
		var n int
		_, err := OpenBackend("/dev/hl3", opener(nil, &n, unix.EPERM), fast)
		require.ErrorIs(t, err, ErrMalfunction)
		require.ErrorIs(t, err, unix.EPERM)
	})
	t.Run("missing node", func(t *testing.T) {
		_, err := Open(NodeInfo{Path: filepath.Join(t.TempDir(), "accel0")}, fast)
		require.ErrorIs(t, err, fs.ErrNotExist)
		require.ErrorIs(t, err, unix.ENOENT)
		_, err = Open(NodeInfo{}, fast)
		require.ErrorIs(t, err, ErrInvalid)
	})
}

func TestNewDeviceClosesBackendOnError(t *testing.T) {
	goya := newFake(ModelGaudi1, hlsys.Accel)
	goya.info.DeviceID = hlsys.DeviceIDGoya
	_, err := NewDevice(goya, Options{})
	require.ErrorIs(t, err, ErrUnsupportedDevice)
	require.Contains(t, err.Error(), "Goya")
	require.Equal(t, 1, goya.closeCount())

	inReset := newFake(ModelGaudi2, hlsys.Accel)
	inReset.status = hlsys.DeviceStatusInReset
	_, err = NewDevice(inReset, Options{})
	require.ErrorIs(t, err, ErrNotOperational)
	require.NotErrorIs(t, err, ErrMalfunction)
	require.Equal(t, 1, inReset.closeCount())

	broken := newFake(ModelGaudi2, hlsys.Accel)
	broken.status = hlsys.DeviceStatusMalfunction
	_, err = NewDevice(broken, Options{})
	require.ErrorIs(t, err, ErrNotOperational)
	require.ErrorIs(t, err, ErrMalfunction)
	require.Equal(t, 1, broken.closeCount())

	// A backend whose numbering does not match the requests: INFO fails.
	wrong := newFake(ModelGaudi2, hlsys.Accel)
	_, err = NewDevice(mislabelled{wrong}, Options{})
	require.ErrorIs(t, err, unix.ENOTTY)
	require.ErrorIs(t, err, ErrNotSupported)
	require.Equal(t, 1, wrong.closeCount())

	_, err = NewDevice(nil, Options{})
	require.ErrorIs(t, err, ErrInvalid)
}

// mislabelled claims legacy numbering over an accel fake.
type mislabelled struct{ *fakeBackend }

func (mislabelled) Numbering() hlsys.Numbering { return hlsys.Legacy }

func TestNewDeviceInfo(t *testing.T) {
	f := newFake(ModelGaudi2, hlsys.Accel)
	copy(f.info.CardName[:], "HL-225")
	copy(f.info.CpucpVersion[:], "fw-1.2")
	d, err := NewDevice(f, Options{})
	require.NoError(t, err)
	defer d.Close()
	require.Equal(t, ModelGaudi2, d.Model())
	require.Equal(t, uint32(hlsys.DeviceIDGaudi2), d.Info().DeviceID)
	require.Equal(t, "fake0", d.Name())
	require.True(t, d.Emulated())
	require.Equal(t, NumberingAccel, d.Numbering())
	require.Equal(t, "DRM accel (/dev/accel/accelN)", d.Numbering().String())
	require.Same(t, f, d.Backend())
	require.Equal(t, HwInfo{
		DeviceID: hlsys.DeviceIDGaudi2, DramBase: 0x1001_0000_0000, DramSize: 1 << 30,
		DramPageSize: 48 << 20, AllocPageSize: 48 << 20, CardName: "HL-225", FirmwareVersion: "fw-1.2",
	}, d.Info())
	require.Equal(t, ExportAPIAddr, d.ExportAPI())
	st, err := d.Status()
	require.NoError(t, err)
	require.Equal(t, StatusOperational, st)
	require.Equal(t, "OPERATIONAL", st.String())
	du, err := d.DramUsage()
	require.NoError(t, err)
	require.Equal(t, uint64(1<<30), du.Free)
}

func TestExportAPIChoice(t *testing.T) {
	for _, tt := range []struct {
		num     hlsys.Numbering
		release string
		want    string
	}{
		{hlsys.Accel, "6.8.0-45-generic", ExportAPIAddr},
		{hlsys.Accel, "6.1", ExportAPIAddr}, // accel nodes imply >= 6.7
		{hlsys.Legacy, "6.1.0-18-amd64", ExportAPI61},
		{hlsys.Legacy, "5.15.0-91-generic", ExportAPI61},
		{hlsys.Legacy, "6.2.16", ExportAPI61},
		{hlsys.Legacy, "6.3.0", ExportAPIAddr},
		{hlsys.Legacy, "6.5.0-1-cloud", ExportAPIAddr},
		{hlsys.Legacy, "6.10.2", ExportAPIAddr},
		{hlsys.Legacy, "7.0", ExportAPIAddr},
		{hlsys.Legacy, "6.1", ExportAPI61},
		{hlsys.Legacy, "garbage", ExportAPI61},
	} {
		f := newFake(ModelGaudi2, tt.num)
		d, err := NewDevice(fakeRelease{f, tt.release}, Options{})
		require.NoError(t, err)
		require.Equal(t, tt.want, d.ExportAPI(), "%v %q", tt.num, tt.release)
		require.Equal(t, tt.release, d.KernelRelease())
		require.NoError(t, d.Close())
	}
	// Without KernelRelease the running kernel's release is used.
	d, err := NewDevice(newFake(ModelGaudi2, hlsys.Legacy), Options{})
	require.NoError(t, err)
	require.NotEmpty(t, d.KernelRelease())
	require.NoError(t, d.Close())
}

func TestParseRelease(t *testing.T) {
	for rel, want := range map[string][2]int{
		"6.1.0-18-amd64": {6, 1}, "6.10": {6, 10}, "5.15.0-91-generic": {5, 15}, "6.8-rc3": {6, 8},
	} {
		ma, mi, ok := parseRelease(rel)
		require.True(t, ok, rel)
		require.Equal(t, want, [2]int{ma, mi}, rel)
	}
	for _, rel := range []string{"", "6", "x.1", "6.x"} {
		_, _, ok := parseRelease(rel)
		require.False(t, ok, rel)
	}
}

func openFake(t *testing.T, m Model, num hlsys.Numbering, release string) (*Device, *fakeBackend) {
	t.Helper()
	f := newFake(m, num)
	d, err := NewDevice(fakeRelease{f, release}, Options{SubmitBackoff: time.Microsecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })
	return d, f
}

func lastMem(f *fakeBackend) hlsys.MemArgs {
	ops := f.memOps()
	return ops[len(ops)-1]
}

func TestGaudi2AllocFreeOrder(t *testing.T) {
	d, f := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
	m, err := d.AllocDevice(1)
	require.NoError(t, err)
	require.Equal(t, uint64(1), m.Size())
	require.Equal(t, uint64(4096), m.AllocSize(), "carved from a slab of one 48 MiB page (slab.go)")
	require.Equal(t, uint64(1), m.Handle())
	require.Equal(t, uint64(0x1000_0000_0000), m.Addr())
	ops := f.memOps()
	require.Len(t, ops, 2)
	require.Equal(t, hlsys.MemArgs{U: [3]uint64{48 << 20, 0, 0}, Op: hlsys.MemOpAlloc}, ops[0])
	require.Equal(t, hlsys.MemArgs{U: [3]uint64{0, 1, 0}, Op: hlsys.MemOpMap}, ops[1])

	m2, err := d.AllocDevice(48<<20 + 1)
	require.NoError(t, err)
	require.Equal(t, uint64(96<<20), m2.AllocSize())

	require.NoError(t, m.Free())
	ops = f.memOps()[4:]
	require.Equal(t, []hlsys.MemArgs{
		{U: [3]uint64{0x1000_0000_0000}, Op: hlsys.MemOpUnmap},
		{U: [3]uint64{1}, Op: hlsys.MemOpFree},
	}, ops)
	require.NoError(t, m.Free(), "second Free is a no-op")
	require.Len(t, f.memOps(), 6)

	_, err = d.AllocDevice(0)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = d.AllocDevice(^uint64(0))
	require.ErrorIs(t, err, ErrNoMemory)

	f.memErr = func(a *hlsys.MemArgs) error {
		if a.Op == hlsys.MemOpAlloc {
			return unix.ENOMEM
		}
		return nil
	}
	_, err = d.AllocDevice(4096)
	require.ErrorIs(t, err, ErrNoMemory)
	require.ErrorIs(t, err, unix.ENOMEM)

	// MAP fails: the handle is freed again.
	f.memErr = func(a *hlsys.MemArgs) error {
		if a.Op == hlsys.MemOpMap {
			return unix.EFAULT
		}
		return nil
	}
	n := len(f.memOps())
	_, err = d.AllocDevice(4096)
	require.ErrorIs(t, err, unix.EFAULT)
	ops = f.memOps()[n:]
	require.Len(t, ops, 3)
	require.Equal(t, uint32(hlsys.MemOpFree), ops[2].Op)
	require.Equal(t, ops[0].U[0], uint64(48<<20))
	f.memErr = nil
	require.NoError(t, m2.Free())
}

func TestGaudi1Alloc(t *testing.T) {
	d, f := openFake(t, ModelGaudi1, hlsys.Legacy, "6.1.0")
	base := f.info.DramBaseAddress
	a, err := d.AllocDevice(1)
	require.NoError(t, err)
	require.Equal(t, base, a.Addr())
	require.Equal(t, uint64(4096), a.AllocSize())
	require.Zero(t, a.Handle())
	b, err := d.AllocDevice(8192 + 5)
	require.NoError(t, err)
	require.Equal(t, base+4096, b.Addr())
	require.Equal(t, uint64(12288), b.AllocSize())
	require.Equal(t, []hlsys.MemArgs{
		{U: [3]uint64{4096}, Op: hlsys.MemOpAlloc},
		{U: [3]uint64{12288}, Op: hlsys.MemOpAlloc},
	}, f.memOps())

	require.NoError(t, a.Free())
	require.Equal(t, hlsys.MemArgs{U: [3]uint64{4096}, Op: hlsys.MemOpFree}, lastMem(f), "Gaudi1 FREE takes the size")
	c, err := d.AllocDevice(4096)
	require.NoError(t, err)
	require.Equal(t, base, c.Addr(), "first fit reuses the hole")

	_, err = d.AllocDevice(64 << 20)
	require.ErrorIs(t, err, ErrNoMemory)
	require.Equal(t, AddrDevice, d.AddrKind(base+100))
	require.Equal(t, AddrDevice, d.AddrKind(base+(64<<20)-1), "Gaudi1: the whole DRAM range is device memory")
	require.Equal(t, AddrUnknown, d.AddrKind(base+(64<<20)))
	require.NoError(t, b.Free())
	require.NoError(t, c.Free())
	require.Equal(t, uint64(64<<20), d.dram.freeBytes())
	big, err := d.AllocDevice(64 << 20)
	require.NoError(t, err, "freed ranges coalesce")
	require.NoError(t, big.Free())
}

func TestRangeAlloc(t *testing.T) {
	a := newRangeAlloc(0x1003, 0x10000, 0x1000) // base rounds up to 0x2000, end down to 0x11000
	require.Equal(t, uint64(0xf000), a.freeBytes())
	var got []uint64
	for range 15 {
		p, ok := a.alloc(0x1000)
		require.True(t, ok)
		got = append(got, p)
	}
	_, ok := a.alloc(0x1000)
	require.False(t, ok)
	require.Equal(t, uint64(0x2000), got[0])
	require.Equal(t, uint64(0x10000), got[14])
	// Free every other page, then their neighbours: everything coalesces.
	for i := 0; i < 15; i += 2 {
		a.free(got[i], 0x1000)
	}
	require.Len(t, a.spans, 8)
	_, ok = a.alloc(0x2000)
	require.False(t, ok, "no two adjacent free pages")
	for i := 1; i < 15; i += 2 {
		a.free(got[i], 0x1000)
	}
	require.Equal(t, []extent{{0x2000, 0x11000}}, a.spans)

	empty := newRangeAlloc(0, 0, 0x1000)
	_, ok = empty.alloc(0x1000)
	require.False(t, ok)
}

func TestExportArgs(t *testing.T) {
	flags := uint32(unix.O_RDWR | unix.O_CLOEXEC)
	t.Run("gaudi2 addr+offset", func(t *testing.T) {
		d, f := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
		m, err := d.AllocDevice(8 << 20)
		require.NoError(t, err)
		b, err := d.ExportDMABuf(m, 4096, 8192)
		require.NoError(t, err)
		require.Equal(t, hlsys.MemArgs{U: [3]uint64{m.Addr(), 8192, 4096}, Op: hlsys.MemOpExportDMABuf, Flags: flags}, lastMem(f))
		require.GreaterOrEqual(t, b.FD().Int(), 0)
		require.True(t, d.ExportOffsetHonored(), "accel numbering: 6.7+")
		require.Equal(t, uint64(4096), b.MemOffset(), "the kernel applies the offset")
		require.Zero(t, b.Offset())
		require.Equal(t, uint64(8192), b.Len())
		require.Equal(t, uint64(8192), b.Size())
		require.Same(t, m, b.Mem())

		err = m.Free()
		require.ErrorIs(t, err, ErrBusy, "free while exported")
		require.NoError(t, b.Close())
		require.Equal(t, -1, b.FD().Int())
		require.NoError(t, b.Close())
		require.NoError(t, m.Free())
		_, err = d.ExportDMABuf(m, 0, 4096)
		require.ErrorIs(t, err, ErrClosed, "export of freed memory")
	})
	t.Run("gaudi2 validation", func(t *testing.T) {
		d, _ := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
		m, err := d.AllocDevice(4096)
		require.NoError(t, err)
		for _, c := range [][2]uint64{{0, 0}, {0, 49 << 20}, {48 << 20, 4096}, {^uint64(0) - 4095, 8192}} {
			_, err := d.ExportDMABuf(m, c[0], c[1])
			require.ErrorIs(t, err, ErrInvalid, "offset %d size %d", c[0], c[1])
		}
		_, err = d.ExportDMABuf(nil, 0, 4096)
		require.ErrorIs(t, err, ErrInvalid)
		other, _ := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
		_, err = other.ExportDMABuf(m, 0, 4096)
		require.ErrorIs(t, err, ErrInvalid, "memory of another device")
	})
	t.Run("gaudi2 6.1 handle", func(t *testing.T) {
		d, f := openFake(t, ModelGaudi2, hlsys.Legacy, "6.1.0-18-amd64")
		require.Equal(t, ExportAPI61, d.ExportAPI())
		m, err := d.AllocDevice(4096)
		require.NoError(t, err)
		require.False(t, d.ExportOffsetHonored())
		part, err := d.ExportDMABuf(m, 4096, 2048) // a part: the whole allocation, the offset carried
		require.NoError(t, err)
		require.Equal(t, hlsys.MemArgs{U: [3]uint64{m.Handle(), 48 << 20}, Op: hlsys.MemOpExportDMABuf, Flags: flags}, lastMem(f))
		require.Equal(t, [4]uint64{0, 4096, 2048, 48 << 20}, [4]uint64{part.MemOffset(), part.Offset(), part.Len(), part.Size()})
		require.NoError(t, part.Close())
		b, err := d.ExportDMABuf(m, 0, 4096)
		require.NoError(t, err)
		require.Equal(t, hlsys.MemArgs{U: [3]uint64{m.Handle(), 48 << 20}, Op: hlsys.MemOpExportDMABuf, Flags: flags}, lastMem(f))
		require.Equal(t, m.AllocSize(), b.Size())
		b2, err := d.ExportDMABuf(m, 0, m.AllocSize())
		require.NoError(t, err)
		require.NoError(t, b.Close())
		require.ErrorIs(t, m.Free(), ErrBusy, "one export still open")
		require.NoError(t, b2.Close())
		require.NoError(t, m.Free())
	})
	t.Run("gaudi1 addr", func(t *testing.T) {
		d, f := openFake(t, ModelGaudi1, hlsys.Accel, "6.8")
		m, err := d.AllocDevice(64 << 10)
		require.NoError(t, err)
		_, err = d.AllocDevice(4096)
		require.NoError(t, err)
		b, err := d.ExportDMABuf(m, 8192, 16384)
		require.NoError(t, err)
		require.Equal(t, hlsys.MemArgs{U: [3]uint64{m.Addr() + 8192, 16384, 0}, Op: hlsys.MemOpExportDMABuf, Flags: flags}, lastMem(f))
		require.NoError(t, b.Close())
	})
	t.Run("gaudi1 6.1", func(t *testing.T) {
		d, f := openFake(t, ModelGaudi1, hlsys.Legacy, "6.1.0")
		m, err := d.AllocDevice(64 << 10)
		require.NoError(t, err)
		b, err := d.ExportDMABuf(m, 4096, 8192)
		require.NoError(t, err)
		require.Equal(t, hlsys.MemArgs{U: [3]uint64{m.Addr() + 4096, 8192}, Op: hlsys.MemOpExportDMABuf, Flags: flags}, lastMem(f))
		require.Equal(t, uint64(8192), b.Size())
		// Device.Close closes the export too.
		require.NoError(t, d.Close())
		require.Equal(t, -1, b.FD().Int())
	})
}

func TestCopySyncQueuesAndCB(t *testing.T) {
	for _, m := range []Model{ModelGaudi1, ModelGaudi2} {
		t.Run(m.String(), func(t *testing.T) {
			d, f := openFake(t, m, hlsys.Accel, "6.8")
			dev, err := d.AllocDevice(1 << 20)
			require.NoError(t, err)
			dev2, err := d.AllocDevice(1 << 20)
			require.NoError(t, err)
			host, err := AllocHostPages(1 << 20)
			require.NoError(t, err)
			defer func() { require.NoError(t, FreeHostPages(host)) }()
			hm, err := d.MapHostBytes(host)
			require.NoError(t, err)
			require.Equal(t, AddrHost, d.AddrKind(hm.DeviceAddr()+5))
			require.Equal(t, AddrDevice, d.AddrKind(dev.Addr()+5))

			require.NoError(t, d.CopySync(dev.Addr(), hm.DeviceAddr(), 100)) // H2D
			require.NoError(t, d.CopySync(hm.DeviceAddr(), dev.Addr(), 100)) // D2H
			require.NoError(t, d.CopySync(dev2.Addr(), dev.Addr(), 100))     // D2D
			require.NoError(t, d.MemsetSync(dev.Addr(), 0, 100))             // device memset
			require.NoError(t, d.MemsetSync(hm.DeviceAddr()+1, 0x11, 100))   // host memset
			require.ErrorIs(t, d.CopySync(dev.Addr(), hm.DeviceAddr(), 0), ErrInvalid)

			f.mu.Lock()
			css := f.csChunks
			f.mu.Unlock()
			require.Len(t, css, 5)
			wantSets := [][]uint32{d.H2DQueues(), d.D2HQueues(), d.D2DQueues(), d.D2DQueues(), d.D2HQueues()}
			for i, cs := range css {
				require.Len(t, cs, 1)
				c := cs[0]
				require.Contains(t, wantSets[i], c.QueueIndex, "CS %d", i)
				if m == ModelGaudi2 {
					require.Equal(t, uint32(hlsys.CSChunkFlagsUserAllocCB), c.Flags)
					require.Equal(t, uint32(LinDMASize+NOPSize), c.CBSize, "LIN_DMA + trailing NOP")
				} else {
					require.Zero(t, c.Flags)
					require.Equal(t, uint32(LinDMASize), c.CBSize)
				}
			}
			h2d, d2h := []uint32{0, 1, 2, 3}, []uint32{4, 5, 6, 7} // Gaudi1 DMA_0_x, DMA_1_x
			if m == ModelGaudi2 {
				h2d, d2h = []uint32{0, 1}, []uint32{4} // PDMA_0_0, PDMA_0_1; PDMA_1_0
			}
			require.Equal(t, h2d, d.H2DQueues())
			require.Equal(t, d2h, d.D2HQueues())
		})
	}
	d, _ := openFake(t, ModelGaudi3, hlsys.Accel, "6.8")
	require.Nil(t, d.H2DQueues())
	require.ErrorIs(t, d.CopySync(0x1000, 0x2000, 1), ErrNotSupported)
}

func TestGaudi1KernelCB(t *testing.T) {
	d, f := openFake(t, ModelGaudi1, hlsys.Legacy, "6.1")
	cb, err := d.NewCB(100)
	require.NoError(t, err)
	require.Equal(t, 100, cb.Cap())
	f.mu.Lock()
	require.Equal(t, hlsys.CBArgs{Op: hlsys.CBOpCreate, CBSize: 100}, f.cbs[0])
	f.mu.Unlock()
	require.NoError(t, cb.AddLinDMA(0x20_0000_0000, 0x1000, 8))
	c := cb.Chunk(4)
	require.Equal(t, hlsys.MmapTypeCB<<12|1<<12, c.Handle)
	require.NoError(t, cb.Close())
	require.NoError(t, cb.Close())
	f.mu.Lock()
	require.Equal(t, hlsys.CBArgs{Handle: c.Handle, Op: hlsys.CBOpDestroy}, f.cbs[1])
	require.Len(t, f.cbs, 2)
	f.mu.Unlock()

	_, err = d.NewCB(0)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = d.NewCB(hlsys.MaxCBSize + 1)
	require.ErrorIs(t, err, ErrInvalid)
}

func TestDeviceCloseReleasesEverything(t *testing.T) {
	f := newFake(ModelGaudi2, hlsys.Accel)
	d, err := NewDevice(f, Options{})
	require.NoError(t, err)
	m, err := d.AllocDevice(4096)
	require.NoError(t, err)
	host, err := AllocHostPages(8192)
	require.NoError(t, err)
	defer func() { require.NoError(t, FreeHostPages(host)) }()
	hm, err := d.MapHostBytes(host)
	require.NoError(t, err)
	cb, err := d.NewCB(4096)
	require.NoError(t, err)
	b, err := d.ExportDMABuf(m, 0, 4096)
	require.NoError(t, err)
	require.Equal(t, 4, d.Stats().Live)
	n := len(f.memOps())

	require.NoError(t, d.Close())
	require.Equal(t, 1, f.closeCount())
	require.Equal(t, -1, b.FD().Int(), "export closed")
	ops := f.memOps()[n:]
	// Reverse creation order: (export fd closed), CB unmap, host unmap, device unmap, free.
	require.Equal(t, []hlsys.MemArgs{
		{U: [3]uint64{cb.va}, Op: hlsys.MemOpUnmap},
		{U: [3]uint64{hm.DeviceAddr()}, Op: hlsys.MemOpUnmap},
		{U: [3]uint64{m.Addr()}, Op: hlsys.MemOpUnmap},
		{U: [3]uint64{m.Handle()}, Op: hlsys.MemOpFree},
	}, ops)
	require.Zero(t, d.Stats().Live)

	// Everything is idempotent after Close; new work fails with ErrClosed.
	require.NoError(t, d.Close())
	require.Equal(t, 1, f.closeCount())
	require.NoError(t, m.Free())
	require.NoError(t, hm.Unmap())
	require.NoError(t, cb.Close())
	require.NoError(t, b.Close())
	_, err = d.AllocDevice(1)
	require.ErrorIs(t, err, ErrClosed)
	_, err = d.MapHostBytes(host)
	require.ErrorIs(t, err, ErrClosed)
	_, err = d.NewCB(64)
	require.ErrorIs(t, err, ErrClosed)
	_, err = d.Submit([]Chunk{{}})
	require.ErrorIs(t, err, ErrClosed)
	_, err = d.Wait(1, 0)
	require.ErrorIs(t, err, ErrClosed)
	_, err = d.Status()
	require.ErrorIs(t, err, ErrClosed)
	require.Len(t, f.memOps(), n+4, "nothing more reached the backend")
}

func TestHostMapping(t *testing.T) {
	d, f := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
	host, err := AllocHostPages(10000)
	require.NoError(t, err)
	require.Len(t, host, 10000)
	require.Equal(t, 12288, cap(host))
	hm, err := d.MapHostBytes(host[5:])
	require.NoError(t, err)
	require.Equal(t, uintptr(pointerOf(host))+5, hm.HostAddr())
	require.Equal(t, uint64(9995), hm.Size())
	a := lastMem(f)
	require.Equal(t, uint32(hlsys.MemOpMap), a.Op)
	require.Equal(t, uint32(hlsys.MemUserPtr), a.Flags)
	require.Equal(t, [3]uint64{uint64(hm.HostAddr()), 0, 9995}, a.U)
	require.NoError(t, hm.Unmap())
	require.Equal(t, hlsys.MemArgs{U: [3]uint64{hm.DeviceAddr()}, Op: hlsys.MemOpUnmap}, lastMem(f))
	require.NoError(t, hm.Unmap())
	require.Equal(t, hlsys.MemArgs{U: [3]uint64{hm.DeviceAddr()}, Op: hlsys.MemOpUnmap}, lastMem(f))

	_, err = d.MapHost(nil, 10)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = d.MapHostBytes(nil)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = AllocHostPages(0)
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorIs(t, FreeHostPages(host[1:]), ErrInvalid)
	require.NoError(t, FreeHostPages(host))
	require.NoError(t, FreeHostPages(nil))
}

// TestConcurrentUse runs every kind of call from several goroutines, then
// closes the device while nothing is in flight; the race detector checks
// the tracking state.
func TestConcurrentUse(t *testing.T) {
	d, _ := openFake(t, ModelGaudi2, hlsys.Accel, "6.8")
	host, err := AllocHostPages(1 << 20)
	require.NoError(t, err)
	defer func() { require.NoError(t, FreeHostPages(host)) }()
	hm, err := d.MapHostBytes(host)
	require.NoError(t, err)

	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 20 {
				m, err := d.AllocDevice(uint64(4096 * (g + i + 1)))
				if err != nil {
					errs <- err
					return
				}
				steps := []func() error{
					func() error { return d.CopySync(m.Addr(), hm.DeviceAddr(), 4096) },
					func() error { return d.CopySync(hm.DeviceAddr(), m.Addr(), 4096) },
					func() error {
						b, err := d.ExportDMABuf(m, 0, 4096)
						if err != nil {
							return err
						}
						if err := m.Free(); !errors.Is(err, ErrBusy) {
							return errors.New("free while exported did not fail with ErrBusy")
						}
						return b.Close()
					},
					func() error {
						if k := d.AddrKind(m.Addr() + 1); k != AddrDevice {
							return fmt.Errorf("AddrKind of live memory = %v", k)
						}
						return nil
					},
					m.Free,
				}
				for _, s := range steps {
					if err := s(); err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.NoError(t, d.Close())
}

// TestAddrKindSpans: AddrKind finds the allocation or mapping holding an
// address among many (a binary search over their spans, where it scanned
// every live resource per copy), at each span's first and last byte and
// one past it, and forgets freed ones.
func TestAddrKindSpans(t *testing.T) {
	for _, m := range []Model{ModelGaudi1, ModelGaudi2} {
		t.Run(m.String(), func(t *testing.T) {
			d, _ := openFake(t, m, hlsys.Accel, "6.8")
			type span struct {
				lo, n uint64
				kind  AddrKind
				free  func() error
			}
			var spans []span
			for i := range 40 {
				dev, err := d.AllocDevice(uint64(4096 * (i%3 + 1)))
				require.NoError(t, err)
				spans = append(spans, span{dev.Addr(), dev.AllocSize(), AddrDevice, dev.Free})
				host, err := AllocHostPages(uint64(4096 * (i%2 + 1)))
				require.NoError(t, err)
				t.Cleanup(func() { _ = FreeHostPages(host) })
				hm, err := d.MapHostBytes(host)
				require.NoError(t, err)
				spans = append(spans, span{hm.DeviceAddr(), uint64(len(host)), AddrHost, hm.Unmap})
			}
			inAny := func(a uint64) bool {
				for _, s := range spans {
					if a >= s.lo && a-s.lo < s.n {
						return true
					}
				}
				return false
			}
			check := func() {
				for _, s := range spans {
					require.Equal(t, s.kind, d.AddrKind(s.lo), "first byte of %#x", s.lo)
					require.Equal(t, s.kind, d.AddrKind(s.lo+s.n-1), "last byte of %#x", s.lo)
					if past := s.lo + s.n; !inAny(past) && m != ModelGaudi1 {
						require.Equal(t, AddrUnknown, d.AddrKind(past), "one past %#x", s.lo)
					}
				}
			}
			check()
			var freed []span
			for i := 0; i < len(spans); i += 3 {
				require.NoError(t, spans[i].free())
				freed = append(freed, spans[i])
			}
			spans = slices.DeleteFunc(spans, func(s span) bool { return slices.ContainsFunc(freed, func(f span) bool { return f.lo == s.lo }) })
			check()
			for _, f := range freed {
				if !inAny(f.lo) && m != ModelGaudi1 {
					require.Equal(t, AddrUnknown, d.AddrKind(f.lo), "freed %#x", f.lo)
				}
			}
		})
	}
}
