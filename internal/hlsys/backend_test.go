package hlsys_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// mapped reports whether every page of b is mapped (madvise answers
// ENOMEM for a range with a page not mapped).
func mapped(b []byte) bool { return unix.Madvise(b, unix.MADV_NORMAL) == nil }

// fileMapped reports whether the process maps any page of the file at
// path (/proc/self/maps names the file of each mapping).
func fileMapped(t *testing.T, path string) bool {
	maps, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return strings.Contains(string(maps), " "+path+"\n")
}

// TestFDBackendPartialMunmap: Munmap may take part of a mapping, as
// munmap(2) does (the driver accepts it: hl_mmap_mem_buf_vm_close and
// hw_block_vm_close count what is left; dma/hlsim RULES.md B10). Close
// then unmaps exactly the pages still mapped: not the pages given back
// (which by then may belong to another mapping), and all of the rest
// (a mapping left behind holds the device file, so the driver would never
// release the context). A regular file stands in for the device node.
func TestFDBackendPartialMunmap(t *testing.T) {
	ps := os.Getpagesize()
	tests := []struct {
		name  string
		unmap [][3]int // Munmap of bytes [page a + byte c, page b), in order
	}{
		{"middle", [][3]int{{1, 2, 0}}},
		{"first", [][3]int{{0, 1, 0}}},
		{"last", [][3]int{{2, 3, 0}}},
		{"middle then first", [][3]int{{1, 2, 0}, {0, 1, 0}}},
		{"middle twice", [][3]int{{1, 2, 0}, {1, 2, 0}}},
		{"middle, then all", [][3]int{{1, 2, 0}, {0, 3, 0}}},
		{"one byte of the first page (rounded up)", [][3]int{{0, 0, 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "node")
			require.NoError(t, os.WriteFile(path, make([]byte, 3*ps), 0o600))
			b, err := hlsys.OpenFD(path)
			require.NoError(t, err)
			m, err := b.Mmap(0, 3*ps)
			require.NoError(t, err)
			gone := make([]bool, 3)
			var others [][]byte
			for _, r := range tt.unmap {
				require.NoError(t, b.Munmap(m[r[0]*ps:r[1]*ps+r[2]]))
				// Another mapping takes each page given back at once.
				for p := r[0]; p*ps < r[1]*ps+r[2]; p++ {
					if gone[p] {
						continue
					}
					gone[p] = true
					ptr, err := unix.MmapPtr(-1, 0, unsafe.Pointer(&m[p*ps]), uintptr(ps), unix.PROT_READ|unix.PROT_WRITE,
						unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE)
					require.NoError(t, err, "page %d is still mapped", p)
					o := unsafe.Slice((*byte)(ptr), ps)
					t.Cleanup(func() { _ = unix.Munmap(o) })
					others = append(others, o)
				}
			}
			require.NoError(t, b.Close())
			for _, o := range others {
				require.True(t, mapped(o), "a page given back by Munmap was unmapped again")
			}
			require.False(t, fileMapped(t, path), "Close left part of the mapping mapped")
		})
	}
	t.Run("not a mapping", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "node")
		require.NoError(t, os.WriteFile(path, make([]byte, ps), 0o600))
		b, err := hlsys.OpenFD(path)
		require.NoError(t, err)
		m, err := b.Mmap(0, ps)
		require.NoError(t, err)
		require.ErrorIs(t, b.Munmap(m[8:]), unix.EINVAL, "start not page aligned")
		require.NoError(t, b.Munmap(pageOf(make([]byte, 2*ps))), "Go memory: no mapping of the node, nothing unmapped")
		require.True(t, fileMapped(t, path))
		require.NoError(t, b.Close())
		require.False(t, fileMapped(t, path), "Close left the mapping mapped")
	})
}

// TestFDBackendMunmapOfMappingInHole: the kernel may place a new Mmap in
// the hole a partial Munmap left in an older mapping; Munmap of the new
// mapping must unmap it (it found the older mapping first, whose page
// there was given back, and left the new one mapped: the CB or block it
// maps stayed referenced in the driver until Close), and leave the older
// mapping's pages alone. The test maps pages until the kernel hands out
// the hole (bounded; Close unmaps the others).
func TestFDBackendMunmapOfMappingInHole(t *testing.T) {
	b, old, inHole := mappingInHole(t)
	ps := os.Getpagesize()
	require.True(t, mapped(inHole))
	require.NoError(t, b.Munmap(inHole))
	require.False(t, mapped(inHole), "Munmap left the mapping in the hole mapped")
	require.True(t, mapped(old[:ps]) && mapped(old[2*ps:]), "Munmap unmapped the older mapping's pages")
}

// pageOf returns the first whole page of b.
func pageOf(b []byte) []byte {
	ps := os.Getpagesize()
	return b[ps-int(uintptr(unsafe.Pointer(&b[0]))%uintptr(ps)):][:ps]
}

// TestFDBackendMunmapNothingMapped: as munmap(2) (torvalds/linux
// mm/vma.c do_vmi_munmap: no vma in the range, return 0) and as the
// emulator (dma/hlsim RULES.md B10), Munmap of a range that no mapping of
// the node holds any more answers 0, and gives nothing back to the
// kernel (the pages may belong to another mapping by now); a start not
// page aligned and a length of 0 stay EINVAL.
func TestFDBackendMunmapNothingMapped(t *testing.T) {
	ps := os.Getpagesize()
	path := filepath.Join(t.TempDir(), "node")
	require.NoError(t, os.WriteFile(path, make([]byte, 2*ps), 0o600))
	b, err := hlsys.OpenFD(path)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	m, err := b.Mmap(0, 2*ps)
	require.NoError(t, err)
	require.NoError(t, b.Munmap(m[ps:]))
	require.NoError(t, b.Munmap(m[ps:]), "a piece unmapped again")
	require.NoError(t, b.Munmap(m))
	require.False(t, fileMapped(t, path))
	tests := []struct {
		name string
		b    []byte
		want error
	}{
		{"the whole mapping again", m, nil},
		{"a piece of it again", m[ps:], nil},
		{"start not page aligned", m[8:], unix.EINVAL},
		{"length 0", m[:0], unix.EINVAL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == nil {
				require.NoError(t, b.Munmap(tt.b))
			} else {
				require.ErrorIs(t, b.Munmap(tt.b), tt.want)
			}
		})
	}
	// The pages given back, mapped again by someone else, are left alone.
	ptr, err := unix.MmapPtr(-1, 0, unsafe.Pointer(&m[0]), uintptr(ps), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED_NOREPLACE)
	if err != nil {
		t.Skipf("the page is taken already: %v", err)
	}
	o := unsafe.Slice((*byte)(ptr), ps)
	defer func() { _ = unix.Munmap(o) }()
	require.NoError(t, b.Munmap(m[:ps]))
	require.True(t, mapped(o), "Munmap unmapped another mapping")
}

// mappingInHole opens a backend on a 3-page node, maps it, unmaps the
// middle page and maps single pages until the kernel places one in that
// hole (bounded: skipped otherwise; the backend's Close, at the test's
// end, unmaps the others). It returns the backend, the older mapping and
// the one in its hole.
func mappingInHole(t *testing.T) (b *hlsys.FDBackend, old, inHole []byte) {
	ps := os.Getpagesize()
	path := filepath.Join(t.TempDir(), "node")
	require.NoError(t, os.WriteFile(path, make([]byte, 3*ps), 0o600))
	b, err := hlsys.OpenFD(path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	old, err = b.Mmap(0, 3*ps)
	require.NoError(t, err)
	hole := old[ps : 2*ps]
	require.NoError(t, b.Munmap(hole))
	for range 1024 {
		m, err := b.Mmap(0, ps)
		require.NoError(t, err)
		if &m[0] == &hole[0] {
			return b, old, m
		}
	}
	// The kernel's placement is its own (another mapping may take the hole).
	t.Skip("the kernel placed none of 1024 new mappings in the hole")
	return nil, nil, nil
}
