//go:build linux

package rdma_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/rdma"
)

// Real DMA-BUF exporters for the test (no Gaudi here): udmabuf (a memfd
// turned into a dma-buf; CONFIG_UDMABUF, e.g. Debian's 6.12 kernel) or vgem
// (a DRM dumb buffer exported with PRIME; Debian's 6.1 kernel has it as a
// module).
const (
	udmabufCreate    = 0x40187542 // _IOW('u', 0x42, struct udmabuf_create)
	udmabufCloexec   = 0x01
	drmIoctlVersion  = 0xC0406400 // _IOWR('d', 0x00, struct drm_version)
	drmIoctlDumb     = 0xC02064B2 // _IOWR('d', 0xB2, struct drm_mode_create_dumb)
	drmIoctlPrimeFD  = 0xC00C642D // _IOWR('d', 0x2d, struct drm_prime_handle)
	dmabufTestLength = 2 << 20
)

type udmabufCreateArg struct {
	Memfd  uint32
	Flags  uint32
	Offset uint64
	Size   uint64
}

type drmVersion struct {
	Major, Minor, Patch int32
	_                   int32
	NameLen             uint64
	Name                uintptr
	DateLen             uint64
	Date                uintptr
	DescLen             uint64
	Desc                uintptr
}

type drmCreateDumb struct {
	Height, Width, BPP, Flags, Handle, Pitch uint32
	Size                                     uint64
}

type drmPrimeHandle struct {
	Handle, Flags uint32
	FD            int32
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

func makeUdmabuf() (int, error) {
	dev, err := unix.Open("/dev/udmabuf", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open /dev/udmabuf: %w", err)
	}
	defer unix.Close(dev)
	memfd, err := unix.MemfdCreate("gxfer-dmabuf-test", unix.MFD_ALLOW_SEALING|unix.MFD_CLOEXEC)
	if err != nil {
		return -1, err
	}
	defer unix.Close(memfd)
	if err := unix.Ftruncate(memfd, dmabufTestLength); err != nil {
		return -1, err
	}
	if _, err := unix.FcntlInt(uintptr(memfd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		return -1, err
	}
	arg := udmabufCreateArg{Memfd: uint32(memfd), Flags: udmabufCloexec, Size: dmabufTestLength}
	r, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(dev), udmabufCreate, uintptr(unsafe.Pointer(&arg)))
	if e != 0 {
		return -1, fmt.Errorf("UDMABUF_CREATE: %w", e)
	}
	return int(r), nil
}

func makeVgemDmabuf() (int, error) {
	cards, _ := filepath.Glob("/dev/dri/card*")
	if len(cards) == 0 {
		return -1, errors.New("no /dev/dri/card*")
	}
	var errs []error
	for _, card := range cards {
		fd, err := func() (int, error) {
			drm, err := unix.Open(card, unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				return -1, err
			}
			defer unix.Close(drm) // the dma-buf keeps the buffer alive
			name := make([]byte, 64)
			var pin runtime.Pinner
			pin.Pin(&name[0])
			defer pin.Unpin()
			v := drmVersion{NameLen: uint64(len(name) - 1), Name: uintptr(unsafe.Pointer(&name[0]))}
			if err := ioctl(drm, drmIoctlVersion, unsafe.Pointer(&v)); err != nil {
				return -1, fmt.Errorf("DRM_IOCTL_VERSION: %w", err)
			}
			if n := string(bytes.TrimRight(name, "\x00")); n != "vgem" {
				return -1, fmt.Errorf("driver %q, not vgem", n)
			}
			cd := drmCreateDumb{Height: dmabufTestLength / 4096, Width: 1024, BPP: 32}
			if err := ioctl(drm, drmIoctlDumb, unsafe.Pointer(&cd)); err != nil {
				return -1, fmt.Errorf("CREATE_DUMB: %w", err)
			}
			ph := drmPrimeHandle{Handle: cd.Handle, Flags: unix.O_CLOEXEC | unix.O_RDWR}
			if err := ioctl(drm, drmIoctlPrimeFD, unsafe.Pointer(&ph)); err != nil {
				return -1, fmt.Errorf("PRIME_HANDLE_TO_FD: %w", err)
			}
			return int(ph.FD), nil
		}()
		if err == nil {
			return fd, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", card, err))
	}
	return -1, errors.Join(errs...)
}

// makeDMABuf returns a real dma-buf fd and which exporter made it, or -1
// and why none could.
func makeDMABuf() (int, string, error) {
	fd, uerr := makeUdmabuf()
	if fd >= 0 {
		return fd, "udmabuf", nil
	}
	fd, verr := makeVgemDmabuf()
	if fd >= 0 {
		return fd, "vgem", nil
	}
	return -1, "", fmt.Errorf("udmabuf: %v; vgem: %v", uerr, verr)
}

// TestDMABuf: the fd -1 probe, then ibv_reg_dmabuf_mr with a real dma-buf.
// Soft-RoCE cannot register dma-buf memory: both must say "not supported"
// with EOPNOTSUPP, which is what sends the engine to host staging.
func TestDMABuf(t *testing.T) {
	e := newEnv(t, rdma.CQConfig{})
	rxe := strings.HasPrefix(e.d.Name(), "rxe")
	probe := e.d.DMABufSupport()
	t.Run("probe", func(t *testing.T) {
		t.Logf("%s: DMABufSupport: %v", e.d.Name(), probe)
		if rxe {
			require.ErrorIs(t, probe, rdma.ErrNotSupported)
			require.ErrorIs(t, probe, syscall.EOPNOTSUPP)
		}
		require.Equal(t, probe, e.d.DMABufSupport(), "a conclusive answer is remembered")
	})
	t.Run("register", func(t *testing.T) {
		fd, exporter, err := makeDMABuf()
		// CI names the exporter its kernel must have (vgem on 6.1, udmabuf
		// on 6.12), so that a missing one fails instead of skipping.
		want := os.Getenv("GXFER_REQUIRE_DMABUF_EXPORTER")
		if fd < 0 {
			if want != "" {
				t.Fatalf("GXFER_REQUIRE_DMABUF_EXPORTER=%s but none works (%s): %v", want, kernelRelease(), err)
			}
			t.Skipf("no DMA-BUF exporter in this kernel (%s): %v", kernelRelease(), err)
		}
		if want != "" && want != exporter {
			unix.Close(fd)
			t.Fatalf("GXFER_REQUIRE_DMABUF_EXPORTER=%s but got %s (%s)", want, exporter, kernelRelease())
		}
		defer unix.Close(fd)
		m, err := unix.Mmap(fd, 0, dmabufTestLength, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		require.NoError(t, err, "mmap the %s dma-buf", exporter)
		defer unix.Munmap(m)
		fill(m[:4096], 0xD3)
		iova := uint64(uintptr(unsafe.Pointer(&m[0])))
		mr, err := e.pd.RegisterDMABuf(fd, 0, dmabufTestLength, iova, 0)
		t.Logf("%s: %s dma-buf fd %d (%d bytes, mmap+write OK): RegisterDMABuf: %v", kernelRelease(), exporter, fd, dmabufTestLength, err)
		if probe != nil {
			require.Error(t, err)
			require.ErrorIs(t, err, rdma.ErrNotSupported, "the probe said unsupported")
			if rxe {
				require.ErrorIs(t, err, syscall.EOPNOTSUPP)
			}
			require.Equal(t, rdma.Counts{PDs: 1, CQs: 1}, e.d.Counts())
			return
		}
		// A device that can: RDMA-write into the dma-buf and check it
		// through the mmap.
		require.NoError(t, err)
		defer mr.Close()
		require.True(t, mr.IsDMABuf())
		a, _ := e.pair(t)
		src := e.mem(t, 4096)
		fill(src.b, 0x3C)
		_, err = a.Do(testCtx(t), rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{src.mr.Seg(0, 4096)}, Remote: mr.Remote().At(4096)})
		require.NoError(t, err)
		require.Equal(t, src.b, m[4096:8192])
	})
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "kernel ?"
	}
	return "kernel " + strings.TrimSpace(string(b))
}
