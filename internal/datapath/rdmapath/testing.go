package rdmapath

import (
	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/rdma"
)

// What the engine's tests look at and force (they run in the Soft-RoCE
// VM); nothing else calls these.

// SetTryDMABuf makes Gaudi buffers attempt ibv_reg_dmabuf_mr even when
// the probe said the device cannot.
func (t *Transport) SetTryDMABuf(on bool) { t.tryDMABuf.Store(on) }

// Probe is the first NIC's DMA-BUF probe (nil: supported).
func (t *Transport) Probe() error { return t.probe }

// MRCache is the first NIC's registration cache.
func (t *Transport) MRCache() *rdma.MRCache { return t.nics[0].mrs }

// Devices are the NICs in use, the first first.
func (t *Transport) Devices() []*rdma.Device {
	out := make([]*rdma.Device, len(t.nics))
	for i, n := range t.nics {
		out[i] = n.dev
	}
	return out
}

// SetServeHook runs fn before each delegated request served (nil: none),
// e.g. to make an owner that never answers.
func (t *Transport) SetServeHook(fn func()) {
	if fn == nil {
		t.serveHook.Store(nil)
		return
	}
	t.serveHook.Store(&fn)
}

// RegionErr is why b (Gaudi memory) has no DMA-BUF region (nil: it has
// one, or none was attempted).
func RegionErr(b datapath.Buf) error {
	st := b.State()
	st.Mu.Lock()
	defer st.Mu.Unlock()
	if r, ok := st.RDMA.(*bufRegions); ok {
		return r.gmrErr
	}
	return nil
}

// QP is the endpoint's queue pair on the first NIC.
func (p *Path) QP() *rdma.QP { return p.conns[0].qp }

// MaxInline is the inline data the first queue pair's writes take.
func (p *Path) MaxInline() int { return p.conns[0].maxInline }

// HoldCredits takes every free send credit of each queue pair (what
// work requests in flight take); release gives them back.
func (p *Path) HoldCredits() (release func()) {
	var n []int
	for _, cn := range p.conns {
		k := 0
		for cn.credits.tryTake() {
			k++
		}
		n = append(n, k)
	}
	return func() {
		for i, cn := range p.conns {
			cn.credits.put(n[i])
		}
	}
}
