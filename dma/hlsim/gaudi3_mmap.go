package hlsim

import (
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/gaudi3"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// The user's mappings of a Gaudi3 CH_A block (RULES.md G3, B10, D12).
// hl_hw_block_mmap maps the block's registers into the process, one vma
// per mmap: the emulator gives each mmap a mapping of its own of the
// register file's shared page (mremap with old_size 0), so that a store
// through any of them is a store to the registers the channel's worker
// reads, and a munmap removes that mapping only (a touch of it faults
// from then on) while the register file stays the device's.

// A CH_A block is one page: a munmap of any part of a view takes the
// whole view (hw_block_vm_close: mapped_size reaches 0).
const _ = uint(gaudi3.ChASize-pageSize) + uint(pageSize-gaudi3.ChASize)

// mmapBlock maps a block handle (memMu held): the length must be the
// block size (gaudi3_block_mmap, as the first reading describes it).
func (c *hctx) mmapBlock(offset uint64, length int) ([]byte, error) {
	id := (offset >> 12) &^ hlsys.MmapTypeBlock
	if !c.d.amap.gaudi3 || id == 0 || id > gaudi3.PDMAChannels {
		return nil, unix.EINVAL
	}
	g := c.g3chans[id-1]
	if g == nil || length != gaudi3.ChASize {
		return nil, unix.EINVAL
	}
	p, err := unix.MremapPtr(unsafe.Pointer(&g.regs[0]), 0, nil, uintptr(length), unix.MREMAP_MAYMOVE)
	if err != nil {
		return nil, unix.ENOMEM
	}
	v := unsafe.Slice((*byte)(p), length)
	g.views = append(g.views, v)
	g.publishViews()
	c.d.st.userMaps.Add(1)
	return v, nil
}

// publishViews makes the views' addresses Doorbell's (memMu held).
func (g *g3chan) publishViews() {
	addrs := make([]*byte, len(g.views))
	for i, v := range g.views {
		addrs[i] = &v[0]
	}
	g.viewAddrs.Store(&addrs)
}

// bellOf returns the channel with a user mapping of its block starting
// at p, if any (no lock: Doorbell).
func (c *hctx) bellOf(p *byte) *g3chan {
	for i := range c.bells {
		g := c.bells[i].Load()
		if g == nil {
			continue
		}
		if addrs := g.viewAddrs.Load(); addrs != nil && slices.Contains(*addrs, p) {
			return g
		}
	}
	return nil
}

// munmapBlocks unmaps the user's mappings of Gaudi3 blocks that overlap
// [lo, hi), both page aligned (memMu held). A block is one page, so a
// mapping that overlaps the range is in it whole (hw_block_vm_close's
// mapped_size reaches 0, the mapping's context reference is put; RULES.md
// B10). The last unmap of a block a Device.Close left mapped (g3kept)
// frees its register file, as hw_block_vm_close puts the context's last
// reference.
func (c *hctx) munmapBlocks(lo, hi uintptr) {
	for _, g := range c.g3chans {
		if g != nil {
			c.d.st.userMaps.Add(-int64(g.dropViews(lo, hi)))
		}
	}
	c.g3kept = slices.DeleteFunc(c.g3kept, func(g *g3chan) bool {
		c.d.st.userMaps.Add(-int64(g.dropViews(lo, hi)))
		if len(g.views) > 0 {
			return false
		}
		_ = unix.Munmap(g.regs)
		return true
	})
}

// dropViews unmaps g's views that overlap [lo, hi) and returns how many
// (memMu held).
func (g *g3chan) dropViews(lo, hi uintptr) int {
	n := len(g.views)
	g.views = slices.DeleteFunc(g.views, func(v []byte) bool {
		base := uintptr(unsafe.Pointer(&v[0]))
		if hi <= base || base+uintptr(len(v)) <= lo {
			return false
		}
		_ = unix.MunmapPtr(unsafe.Pointer(&v[0]), uintptr(len(v)))
		return true
	})
	if len(g.views) != n {
		g.publishViews()
	}
	return n - len(g.views)
}

// unmapBlock undoes the user's mappings of g's block and frees its
// register file (memMu held; the worker stopped and g released).
func (c *hctx) unmapBlock(g *g3chan) {
	for _, v := range g.views {
		_ = unix.MunmapPtr(unsafe.Pointer(&v[0]), uintptr(len(v)))
	}
	c.d.st.userMaps.Add(-int64(len(g.views)))
	g.views = nil
	g.publishViews()
	_ = unix.Munmap(g.regs)
}
