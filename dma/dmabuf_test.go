package dma

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// exportGeom is what a DMABuf reports: [MemOffset, MemOffset+Size) of the
// allocation is exported, the wanted range is [Offset, Offset+Len) of it.
type exportGeom struct{ memOff, off, length, size uint64 }

func geomOf(b *DMABuf) exportGeom { return exportGeom{b.MemOffset(), b.Offset(), b.Len(), b.Size()} }

// TestExportOffsetCarried: on kernels 6.3-6.6 (legacy numbering with the
// {addr, size, offset} API) the driver validates EXPORT_DMABUF_FD's offset
// but builds the scatter list from the start of the allocation (fixed by
// "accel/habanalabs: add missing offset handling for dma-buf", 6.7). gxfer
// must then pass offset 0, export from the allocation start and report the
// offset itself; before the fix it passed the offset and reported it as if
// the kernel had applied it. From 6.7 (accel numbering) the kernel's offset
// is used. Sizes are rounded up to whole pages (the driver takes only page
// multiples); on 6.3-6.6 every export covers the whole allocation (one
// size for all exports of it: TestExportSubRangesOfOneAllocation), written
// 0 in the table.
func TestExportOffsetCarried(t *testing.T) {
	flags := uint32(unix.O_RDWR | unix.O_CLOEXEC)
	const pg = 4096
	if uint64(unix.Getpagesize()) != pg {
		t.Skip("the expected arguments assume 4 KiB pages")
	}
	for _, tc := range []struct {
		name         string
		num          hlsys.Numbering
		release      string
		honored      bool
		off, size    uint64
		wantU        [3]uint64 // addr is added to U[0] below
		want         exportGeom
		wantSameAddr bool
	}{
		{"6.5 offset", hlsys.Legacy, "6.5.0-1", false, 2 * pg, 3 * pg, [3]uint64{0, 0, 0}, exportGeom{0, 2 * pg, 3 * pg, 0}, true},
		{"6.5 no offset", hlsys.Legacy, "6.5.0-1", false, 0, 3 * pg, [3]uint64{0, 0, 0}, exportGeom{0, 0, 3 * pg, 0}, true},
		{"6.5 sub-page", hlsys.Legacy, "6.4", false, pg + 100, 50, [3]uint64{0, 0, 0}, exportGeom{0, pg + 100, 50, 0}, true},
		{"6.8 offset", hlsys.Accel, "6.8.0", true, 2 * pg, 3 * pg, [3]uint64{0, 3 * pg, 2 * pg}, exportGeom{2 * pg, 0, 3 * pg, 3 * pg}, true},
		{"6.8 sub-page", hlsys.Accel, "6.8.0", true, pg + 100, 50, [3]uint64{0, pg, pg}, exportGeom{pg, 100, 50, pg}, true},
		{"6.8 size rounded", hlsys.Accel, "6.12", true, 0, 100, [3]uint64{0, pg, 0}, exportGeom{0, 0, 100, pg}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, f := openFake(t, ModelGaudi2, tc.num, tc.release)
			require.Equal(t, ExportAPIAddr, d.ExportAPI())
			require.Equal(t, tc.honored, d.ExportOffsetHonored())
			m, err := d.AllocDevice(1 << 20)
			require.NoError(t, err)
			b, err := d.ExportDMABuf(m, tc.off, tc.size)
			require.NoError(t, err)
			defer func() { require.NoError(t, b.Close()) }()
			want, geom := tc.wantU, tc.want
			want[0] += m.Addr() // always exactly the VA MAP returned
			if !tc.honored {
				want[1], geom.size = m.AllocSize(), m.AllocSize()
			}
			require.Equal(t, hlsys.MemArgs{U: want, Op: hlsys.MemOpExportDMABuf, Flags: flags}, lastMem(f))
			require.Equal(t, geom, geomOf(b))
			require.Zero(t, b.Size()%pg, "the driver exports whole pages")
			require.LessOrEqual(t, b.Offset()+b.Len(), b.Size())
			require.Equal(t, tc.off, b.MemOffset()+b.Offset(), "the wanted range is where the DMABuf says")
		})
	}
}

// TestExportGaudi1Rounded: Gaudi1 exports a physical range (offset 0 in
// the ioctl) starting at the page of the first wanted byte, rounded to
// whole pages.
func TestExportGaudi1Rounded(t *testing.T) {
	for _, num := range []hlsys.Numbering{hlsys.Legacy, hlsys.Accel} {
		d, f := openFake(t, ModelGaudi1, num, "6.5")
		m, err := d.AllocDevice(64 << 10)
		require.NoError(t, err)
		b, err := d.ExportDMABuf(m, 8192+10, 100)
		require.NoError(t, err)
		u := lastMem(f).U
		require.Equal(t, m.Addr()+8192, u[0])
		require.Equal(t, uint64(4096), u[1])
		require.Zero(t, u[2])
		require.Equal(t, exportGeom{8192, 10, 100, 4096}, geomOf(b))
		require.NoError(t, b.Close())
	}
}

// TestExportRoundingPastAllocationRefused: when the page-rounded range
// would pass the end of the allocation, the export is refused with
// ErrInvalid instead of exposing memory that is not the allocation's.
func TestExportRoundingPastAllocationRefused(t *testing.T) {
	if unix.Getpagesize() != 4096 {
		t.Skip("assumes 4 KiB pages")
	}
	f := newFake(ModelGaudi2, hlsys.Accel)
	f.info.DeviceMemAllocDefaultPageSize = 6144 // not a page multiple
	d, err := NewDevice(fakeRelease{f, "6.8"}, Options{})
	require.NoError(t, err)
	defer func() { require.NoError(t, d.Close()) }()
	m, err := d.AllocDevice(6144)
	require.NoError(t, err)
	require.Equal(t, uint64(6144), m.AllocSize())
	n := len(f.memOps())
	_, err = d.ExportDMABuf(m, 0, 6144)
	require.ErrorIs(t, err, ErrInvalid)
	require.Len(t, f.memOps(), n, "nothing sent to the driver")
	b, err := d.ExportDMABuf(m, 0, 4096)
	require.NoError(t, err)
	require.NoError(t, b.Close())
}

// exportRec records the arguments of every EXPORT_DMABUF_FD.
type exportRec struct {
	hlsys.Backend
	mu   sync.Mutex
	args []hlsys.MemArgs
}

func (r *exportRec) KernelRelease() string {
	return r.Backend.(interface{ KernelRelease() string }).KernelRelease()
}

func (r *exportRec) Ioctl(req uintptr, arg unsafe.Pointer) error {
	if _, nr, _ := hlsys.Decode(req); nr == hlsys.IoctlMemory {
		if a := (*hlsys.MemArgs)(arg); a.Op == hlsys.MemOpExportDMABuf {
			r.mu.Lock()
			r.args = append(r.args, *a)
			r.mu.Unlock()
		}
	}
	return r.Backend.Ioctl(req, arg)
}

// TestExportOffsetHlsim: an emulated Gaudi2 on a 6.5 kernel (the offset
// ignored by the driver) and on 6.8: the driver's offset is 0 on 6.5, and
// on both an importer reading the DMA-BUF at Offset gets the wanted bytes
// (before the fix, on 6.5 it got the allocation's first bytes).
func TestExportOffsetHlsim(t *testing.T) {
	for _, k := range []struct {
		kernel  string
		honored bool
	}{{"6.5", false}, {"6.8", true}} {
		t.Run("kernel"+k.kernel, func(t *testing.T) {
			sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi2, DRAMSize: 64 << 20, Kernel: k.kernel})
			require.NoError(t, err)
			defer func() { require.NoError(t, sim.Close()) }()
			rec := &exportRec{}
			d, err := OpenBackend(sim.Name(), func() (hlsys.Backend, error) {
				b, err := simOpen(sim)()
				if err != nil {
					return nil, err
				}
				rec.Backend = b
				return rec, nil
			}, Options{})
			require.NoError(t, err)
			defer func() { require.NoError(t, d.Close()) }()
			require.Equal(t, ExportAPIAddr, d.ExportAPI())
			require.Equal(t, k.honored, d.ExportOffsetHonored())

			const n = 1 << 20
			m, err := d.AllocDevice(n)
			require.NoError(t, err)
			host, err := AllocHostPages(n)
			require.NoError(t, err)
			defer func() { require.NoError(t, FreeHostPages(host)) }()
			hm, err := d.MapHostBytes(host)
			require.NoError(t, err)
			data := pattern(n)
			copy(host, data)
			require.NoError(t, d.CopySync(m.Addr(), hm.DeviceAddr(), n))
			require.NoError(t, hm.Unmap())

			const off, size = 3*4096 + 17, 5000
			b, err := d.ExportDMABuf(m, off, size)
			require.NoError(t, err)
			rec.mu.Lock()
			args := rec.args[len(rec.args)-1]
			rec.mu.Unlock()
			require.Equal(t, m.Addr(), args.U[0])
			if !k.honored {
				require.Zero(t, args.U[2], "6.3-6.6: never a non-zero offset to the driver")
			}
			require.Equal(t, b.MemOffset(), args.U[2])
			require.Equal(t, b.Size(), args.U[1])
			require.Equal(t, uint64(off), b.MemOffset()+b.Offset())

			// Read the DMA-BUF the way an importer (a NIC) sees it: on 6.5
			// the emulated driver builds it from the allocation start
			// whatever offset was passed, as the real one does.
			view, err := sim.DMABufView(b.FD().Int())
			require.NoError(t, err)
			require.Equal(t, b.Size(), view.Size)
			got := make([]byte, size)
			r, err := view.ReadAt(b.FD().Int(), got, b.Offset())
			require.NoError(t, err)
			require.Equal(t, size, r)
			require.True(t, bytes.Equal(data[off:off+size], got), "the importer reads the wanted bytes at Offset")
			require.NoError(t, b.Close())
		})
	}
}

// TestFreeRetriedAfterImporterLetGo: an importer (an RDMA MR, a peer the
// fd was sent to) keeps a DMA-BUF alive after the DMABuf is closed, and
// the driver refuses to unmap exported memory until the last reference
// goes (unmap_device_va, memory.c: "failed to unmap %#llx, memory is
// exported", EINVAL). Free then fails; once the importer lets go, a
// second Free must unmap and free the allocation. It used to be marked
// freed by the first attempt, so the retry returned nil and the DRAM
// stayed allocated until the context closed.
func TestFreeRetriedAfterImporterLetGo(t *testing.T) {
	if b, err := os.ReadFile("/proc/sys/fs/leases-enable"); err == nil && strings.TrimSpace(string(b)) == "0" {
		t.Skip("fs.leases-enable=0: the emulator pins an export until its context closes")
	}
	sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi2, DRAMSize: 256 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sim.Close() })
	d, err := OpenBackend(sim.Name(), simOpen(sim), Options{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = d.Close() })

	before, err := d.DramUsage()
	require.NoError(t, err)
	// A whole page, an allocation of its own (a smaller buffer is carved
	// from a slab: TestSlabExportedRangeNotReused).
	m, err := d.AllocDevice(hlsim.DefaultDRAMPageSize)
	require.NoError(t, err)
	require.Nil(t, m.slab)
	b, err := d.ExportDMABuf(m, 0, 4096)
	require.NoError(t, err)
	importer, err := b.FD().Dup()
	require.NoError(t, err)
	require.NoError(t, b.Close())

	require.ErrorIs(t, m.Free(), unix.EINVAL, "the importer still holds the DMA-BUF")
	require.Equal(t, AddrDevice, d.AddrKind(m.Addr()), "memory the driver kept is still the device's")
	require.NoError(t, importer.Close())
	require.NoError(t, m.Free())
	after, err := d.DramUsage()
	require.NoError(t, err)
	require.Equal(t, before.Used, after.Used, "the allocation is freed in the driver")
	require.Zero(t, d.Stats().Live)
}
