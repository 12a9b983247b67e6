package hlsim

import (
	"os"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

func TestMemoryGaudi2(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi2, DRAMSize: 64 << 20})
	b := r.b
	page := r.info.DramPageSize

	_, err := hlsys.MemAlloc(b, 0, 0, 0)
	isErrno(t, err, unix.EINVAL)
	_, err = hlsys.MemAlloc(b, 65<<20, 0, 0)
	isErrno(t, err, unix.ENOMEM)
	h1, err := hlsys.MemAlloc(b, 1, 0, hlsys.MemContiguous)
	require.NoError(t, err)
	require.GreaterOrEqual(t, h1, uint64(1))
	h2, err := hlsys.MemAlloc(b, page+1, 0, 0)
	require.NoError(t, err)
	require.NotEqual(t, h1, h2)
	u, err := hlsys.GetDramUsage(b)
	require.NoError(t, err)
	require.Equal(t, 3*page, u.CtxDramMem, "sizes round up to the page")

	// A user page size is ignored (TestRulesGaudi2AllocPageSize).
	// The rest of the DRAM is allocatable, one byte more is not.
	rest := 64<<20 - 3*page
	h4, err := hlsys.MemAlloc(b, rest, 0, 0)
	require.NoError(t, err)
	_, err = hlsys.MemAlloc(b, 1, 0, 0)
	isErrno(t, err, unix.ENOMEM)
	require.NoError(t, hlsys.MemFree(b, h4))

	va1, err := hlsys.MemMapDevice(b, h1, 0, 0)
	require.NoError(t, err)
	require.GreaterOrEqual(t, va1, r.info.DramBaseAddress)
	require.Zero(t, (va1-r.info.DramBaseAddress)%page, "DRAM VAs are page aligned")
	va2, err := hlsys.MemMapDevice(b, h2, 0, 0)
	require.NoError(t, err)
	require.NotEqual(t, va1, va2)
	_, err = hlsys.MemMapDevice(b, 999, 0, 0)
	isErrno(t, err, unix.EINVAL)

	// FREE of a mapped handle fails; UNMAP needs the exact VA.
	isErrno(t, hlsys.MemFree(b, h1), unix.EINVAL)
	isErrno(t, hlsys.MemUnmap(b, va1+4096), unix.EINVAL)
	isErrno(t, hlsys.MemUnmap(b, 0x1234), unix.EINVAL)
	require.NoError(t, hlsys.MemUnmap(b, va1))
	isErrno(t, hlsys.MemUnmap(b, va1), unix.EINVAL)
	require.NoError(t, hlsys.MemFree(b, h1))
	isErrno(t, hlsys.MemFree(b, h1), unix.EINVAL)

	// A handle may be mapped twice; FREE waits for both UNMAPs.
	va2b, err := hlsys.MemMapDevice(b, h2, 0, 0)
	require.NoError(t, err)
	require.NoError(t, hlsys.MemUnmap(b, va2))
	isErrno(t, hlsys.MemFree(b, h2), unix.EINVAL)
	require.NoError(t, hlsys.MemUnmap(b, va2b))

	// Hints: honoured when free and aligned; FORCE_HINT fails otherwise.
	hint := r.info.DramBaseAddress + 100*page
	va, err := hlsys.MemMapDevice(b, h2, hint, 0)
	require.NoError(t, err)
	require.Equal(t, hint, va)
	_, err = hlsys.MemMapDevice(b, h2, hint, hlsys.MemForceHint)
	isErrno(t, err, unix.ENOMEM)
	va3, err := hlsys.MemMapDevice(b, h2, hint, 0) // taken: placed elsewhere
	require.NoError(t, err)
	require.NotEqual(t, hint, va3)
	require.NoError(t, hlsys.MemUnmap(b, va))
	require.NoError(t, hlsys.MemUnmap(b, va3))
	require.NoError(t, hlsys.MemFree(b, h2))

	u, err = hlsys.GetDramUsage(b)
	require.NoError(t, err)
	require.Zero(t, u.CtxDramMem)

	var m hlsys.MemArgs
	m.Op = hlsys.MemOpMapBlock
	require.ErrorIs(t, hlsys.Memory(b, &m), unix.EOPNOTSUPP)
	m.Op = 77
	require.ErrorIs(t, hlsys.Memory(b, &m), unix.EINVAL)
}

func TestMemoryGaudi1(t *testing.T) {
	r := newRig(t, Config{Model: ModelGaudi1, DRAMSize: 64 << 20})
	b := r.b
	h, err := hlsys.MemAlloc(b, 3<<20, 0, 0)
	require.NoError(t, err)
	require.Zero(t, h, "Gaudi ALLOC is accounting only")
	u, err := hlsys.GetDramUsage(b)
	require.NoError(t, err)
	require.Equal(t, uint64(3<<20), u.CtxDramMem)
	// Accounting only: the driver does not check it against the DRAM.
	_, err = hlsys.MemAlloc(b, 62<<20, 0, 0)
	require.NoError(t, err)
	require.NoError(t, hlsys.MemFree(b, 62<<20))
	_, err = hlsys.MemAlloc(b, 0, 0, 0)
	isErrno(t, err, unix.EINVAL)

	_, err = hlsys.MemMapDevice(b, 0, 0, 0)
	isErrno(t, err, unix.EINVAL)
	_, err = hlsys.MemMapDevice(b, 1, 0, 0)
	isErrno(t, err, unix.EINVAL)

	require.NoError(t, hlsys.MemFree(b, 1<<20)) // FREE takes the size
	require.NoError(t, hlsys.MemFree(b, 2<<20))
	u, err = hlsys.GetDramUsage(b)
	require.NoError(t, err)
	require.Zero(t, u.CtxDramMem)
}

func TestMapHost(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m})
			b := r.b
			buf := hostMem(t, 3*4096)
			va, err := hlsys.MemMapHost(b, unsafe.Pointer(&buf[0]), 3*4096, 0, 0)
			require.NoError(t, err)
			require.Zero(t, va%4096)
			require.False(t, r.d.amap.gaudi2 && va >= r.info.DramBaseAddress && va < r.info.DramBaseAddress+g2DMMUSpan)

			// In-page offset kept; UNMAP needs exactly the returned VA.
			va2, err := hlsys.MemMapHost(b, unsafe.Pointer(&buf[100]), 5000, 0, 0)
			require.NoError(t, err)
			require.Equal(t, uint64(100), va2%4096)
			isErrno(t, hlsys.MemUnmap(b, va2-100), unix.EINVAL)
			require.NoError(t, hlsys.MemUnmap(b, va2))
			require.NoError(t, hlsys.MemUnmap(b, va))
			isErrno(t, hlsys.MemUnmap(b, va), unix.EINVAL)

			_, err = hlsys.MemMapHost(b, unsafe.Pointer(&buf[0]), 0, 0, 0)
			isErrno(t, err, unix.EINVAL)

			// An unmapped host range cannot be pinned.
			hole := hostMem(t, 2*4096)
			require.NoError(t, unix.MunmapPtr(unsafe.Pointer(&hole[4096]), 4096))
			_, err = hlsys.MemMapHost(b, unsafe.Pointer(&hole[0]), 2*4096, 0, 0)
			isErrno(t, err, unix.EFAULT)

			// A 2 MiB aligned host VA gets a 2 MiB aligned device VA; the
			// pages stay 4 KiB ones unless the DMA addresses are 2 MiB
			// aligned (TestRulesMapHost).
			big := hostMem(t, 6<<20)
			off := (2<<20 - int(addrOf(big)%(2<<20))) % (2 << 20)
			vah, err := hlsys.MemMapHost(b, unsafe.Pointer(&big[off]), 2<<20, 0, 0)
			require.NoError(t, err)
			require.Zero(t, vah%(2<<20))
			require.True(t, r.d.amap.pmmuBase <= vah && vah < r.d.amap.pmmuHuge, "4 KiB PMMU range")
			require.NoError(t, hlsys.MemUnmap(b, vah))
		})
	}
}

// TestMapHostGoHeap maps an unaligned Go-heap slice and moves data to and
// from it through the device.
func TestMapHostGoHeap(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m})
			heap := make([]byte, 20000)
			var pin runtime.Pinner // keeps heap off the goroutine stack
			pin.Pin(&heap[0])
			defer pin.Unpin()
			p := heap[333:]
			const n = 9000
			copy(p, pattern(n, 5))
			va, err := hlsys.MemMapHost(r.b, unsafe.Pointer(&p[0]), n, 0, 0)
			require.NoError(t, err)
			require.Equal(t, addrOf(p)%4096, va%4096)

			dram := r.dram(n)
			r.mustRun(linDMA(r.g1, dram, va, n))
			clear(p[:n])
			r.mustRun(linDMA(r.g1, va, dram, n))
			require.Equal(t, pattern(n, 5), p[:n])
			require.NoError(t, hlsys.MemUnmap(r.b, va))
			runtime.KeepAlive(heap)
		})
	}
}

func TestExportDMABuf(t *testing.T) {
	type tc struct {
		model  Model
		kernel string
	}
	for _, c := range []tc{{ModelGaudi2, "6.8"}, {ModelGaudi2, "6.1"}, {ModelGaudi1, "6.8"}, {ModelGaudi1, "6.1"}} {
		t.Run(c.model.String()+"/"+c.kernel, func(t *testing.T) {
			r := newRig(t, Config{Model: c.model, Kernel: c.kernel, DRAMSize: 64 << 20})
			b := r.b
			newAPI := c.kernel != "6.1"
			const n = 2 << 20
			src, hva := r.host(n)
			copy(src, pattern(n, 9))

			var (
				addr, handle uint64
				fileOff      int64 // where the exported bytes sit in the fd
			)
			if c.model == ModelGaudi2 {
				var err error
				handle, err = hlsys.MemAlloc(b, n, 0, 0)
				require.NoError(t, err)
				addr, err = hlsys.MemMapDevice(b, handle, 0, 0)
				require.NoError(t, err)
			} else {
				addr = r.dram(n)
				fileOff = int64(addr - r.info.DramBaseAddress)
			}
			r.mustRun(linDMA(r.g1, addr, hva, n))

			export := func(size, off uint64) (int, error) {
				var f interface{ Disown() int }
				var err error
				switch {
				case newAPI:
					f, err = hlsys.MemExportDMABuf(b, addr, size, off)
				case c.model == ModelGaudi2:
					f, err = hlsys.MemExportDMABuf61(b, handle, size)
				default:
					f, err = hlsys.MemExportDMABuf61(b, addr, size)
				}
				if err != nil {
					return -1, err
				}
				return f.Disown(), nil
			}
			fd, err := export(n, 0)
			require.NoError(t, err)
			got := make([]byte, n)
			k, err := unix.Pread(fd, got, fileOff)
			require.NoError(t, err)
			require.Equal(t, n, k)
			require.Equal(t, pattern(n, 9), got, "the dma-buf holds the exported DRAM")

			// Aliasing: bytes written through the device show in an mmap of
			// the fd (tests may map it; production code never does).
			mm, err := unix.Mmap(fd, fileOff, 4096, unix.PROT_READ, unix.MAP_SHARED)
			require.NoError(t, err)
			r.mustRun(memsetPkt(r.g1, addr, 0x0102030405060708, 16))
			require.Equal(t, []byte{8, 7, 6, 5, 4, 3, 2, 1, 8, 7, 6, 5, 4, 3, 2, 1}, mm[:16])
			require.NoError(t, unix.Munmap(mm))

			// Other file flags are taken as dma_buf_export takes them:
			// the access mode and O_CLOEXEC of the new fd.
			for _, fl := range []uint32{unix.O_RDWR, unix.O_RDONLY | unix.O_CLOEXEC} {
				u := [3]uint64{addr, n, 0}
				if !newAPI && c.model == ModelGaudi2 {
					u = [3]uint64{handle, n}
				}
				a := hlsys.MemArgs{U: u, Op: hlsys.MemOpExportDMABuf, Flags: fl}
				require.NoError(t, hlsys.Memory(b, &a))
				efd := int(int32(a.U[0]))
				got, err := unix.FcntlInt(uintptr(efd), unix.F_GETFL, 0)
				require.NoError(t, err)
				require.Equal(t, int(fl)&unix.O_ACCMODE, got&unix.O_ACCMODE)
				fdfl, err := unix.FcntlInt(uintptr(efd), unix.F_GETFD, 0)
				require.NoError(t, err)
				require.Equal(t, fl&unix.O_CLOEXEC != 0, fdfl&unix.FD_CLOEXEC != 0)
				require.NoError(t, unix.Close(efd))
			}
			// Host memory is never exportable.
			_, err = hlsys.MemExportDMABuf(b, hva, 4096, 0)
			isErrno(t, err, unix.EINVAL)

			if newAPI {
				for name, bad := range map[string][3]uint64{
					"not the MAP VA":  {addr + 4096, 4096, 0},
					"unaligned addr":  {addr + 1, 4096, 0},
					"small size":      {addr, 100, 0},
					"unaligned off":   {addr, 4096, 100},
					"beyond the end":  {addr, n, 4096},
					"size overflow":   {addr, ^uint64(0), 4096},
					"outside DRAM":    {0x1000, 4096, 0},
					"gaudi1 off != 0": {addr, 4096, 4096},
				} {
					if c.model == ModelGaudi1 && (name == "not the MAP VA" || name == "beyond the end") {
						continue // any page-aligned physical range is fine on Gaudi1
					}
					if c.model == ModelGaudi2 && name == "gaudi1 off != 0" {
						fd2, err := hlsys.MemExportDMABuf(b, bad[0], bad[1], bad[2])
						require.NoError(t, err, "Gaudi2 takes an offset")
						require.NoError(t, fd2.Close())
						continue
					}
					_, err := hlsys.MemExportDMABuf(b, bad[0], bad[1], bad[2])
					isErrno(t, err, unix.EINVAL)
				}
			} else if c.model == ModelGaudi2 {
				_, err := hlsys.MemExportDMABuf61(b, handle+100, n)
				isErrno(t, err, unix.EINVAL)
			} else {
				_, err := hlsys.MemExportDMABuf61(b, r.info.DramBaseAddress+r.info.DramSize, 4096)
				isErrno(t, err, unix.EINVAL)
			}

			if !r.d.leases {
				require.NoError(t, unix.Close(fd))
				t.Skip("write leases unavailable (fs.leases-enable=0): exports pin until close")
			}
			if c.model == ModelGaudi2 {
				if newAPI {
					// The export pins the VA until the fd is closed.
					isErrno(t, hlsys.MemUnmap(b, addr), unix.EINVAL)
					require.NoError(t, unix.Close(fd))
					require.NoError(t, hlsys.MemUnmap(b, addr))
					require.NoError(t, hlsys.MemFree(b, handle))
				} else {
					// 6.1: the export holds the handle.
					require.NoError(t, hlsys.MemUnmap(b, addr))
					isErrno(t, hlsys.MemFree(b, handle), unix.EINVAL)
					require.NoError(t, unix.Close(fd))
					require.NoError(t, hlsys.MemFree(b, handle))
				}
			} else {
				require.NoError(t, unix.Close(fd))
			}
		})
	}
}

// TestExportOutlivesDevice: an exported fd belongs to the caller and keeps
// the memory after the context and the device are gone.
func TestExportOutlivesDevice(t *testing.T) {
	for _, m := range models {
		t.Run(m.String(), func(t *testing.T) {
			r := newRig(t, Config{Model: m, DRAMSize: 64 << 20})
			src, hva := r.host(4096)
			copy(src, pattern(4096, 3))
			addr := r.dram(4096)
			r.mustRun(linDMA(r.g1, addr, hva, 4096))
			f, err := hlsys.MemExportDMABuf(r.b, addr, 4096, 0)
			require.NoError(t, err)
			defer f.Close()
			require.NoError(t, r.b.Close())
			require.NoError(t, r.d.Close())
			got := make([]byte, 4096)
			off := int64(0)
			if m == ModelGaudi1 {
				off = int64(addr - r.info.DramBaseAddress)
			}
			_, err = unix.Pread(f.Int(), got, off)
			require.NoError(t, err)
			require.Equal(t, pattern(4096, 3), got)
		})
	}
}

// TestExportPinWithoutLeases: when write leases cannot tell whether an
// export is still open, an export pins its VA until the context closes.
func TestExportPinWithoutLeases(t *testing.T) {
	r := newRig(t, Config{})
	r.d.leases = false
	h, err := hlsys.MemAlloc(r.b, 4096, 0, 0)
	require.NoError(t, err)
	va, err := hlsys.MemMapDevice(r.b, h, 0, 0)
	require.NoError(t, err)
	f, err := hlsys.MemExportDMABuf(r.b, va, 4096, 0)
	require.NoError(t, err)
	require.NoError(t, f.Close())
	isErrno(t, hlsys.MemUnmap(r.b, va), unix.EINVAL)
	require.NoError(t, r.b.Close()) // releases it anyway
}

func TestLeaseProbe(t *testing.T) {
	if b, err := os.ReadFile("/proc/sys/fs/leases-enable"); err == nil && strings.TrimSpace(string(b)) == "0" {
		t.Skip("fs.leases-enable=0")
	}
	require.True(t, probeLeases(), "with leases enabled the export probe works")
}
