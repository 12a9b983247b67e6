package rdmapath

import (
	"errors"
	"fmt"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/rdma"
	"github.com/gxfer/gxfer/wire"
)

// bufRegions is a buffer's RDMA state (datapath.BufState.RDMA, guarded
// by BufState.Mu): an exported host buffer's cached region on each NIC, a
// Gaudi buffer's DMA-BUF region or why it could not be registered.
type bufRegions struct {
	xref   [wire.MaxNICs]rdma.MRRef
	gmr    *gaudiRegion
	gmrErr error
}

// gaudiRegion is a Gaudi buffer's DMA-BUF memory region.
type gaudiRegion struct {
	mr      *rdma.MR
	release func() // drops the DMA-BUF export, held while registered (nil: nothing to drop)
}

// regions is b's RDMA state, made on first use (BufState.Mu held); the
// buffer is remembered so that Close releases what it still holds.
func (t *Transport) regions(b datapath.Buf) *bufRegions {
	st := b.State()
	if r, ok := st.RDMA.(*bufRegions); ok {
		return r
	}
	r := &bufRegions{}
	st.RDMA = r
	t.bufMu.Lock()
	t.bufs[b] = struct{}{}
	t.bufMu.Unlock()
	return r
}

// dmabufUnsupported is why Gaudi memory is not registered directly (nil:
// it is).
func (t *Transport) dmabufUnsupported() error {
	t.dmabufMu.Lock()
	defer t.dmabufMu.Unlock()
	if t.dmabufErr != nil {
		return t.dmabufErr
	}
	if t.probe != nil && !t.tryDMABuf.Load() {
		return t.probe
	}
	return nil
}

// gaudiMR returns the buffer's DMA-BUF memory region (remote read and
// write) on the first NIC, registering it on first use: the buffer is
// exported as a DMA-BUF (Buf.ExportDMABuf: for engine memory once,
// through the device's export cache; for runtime memory the pool's
// DMA-BUF) and registered with ibv_reg_dmabuf_mr at offset = the
// buffer's offset in the DMA-BUF and iova = its device address, so remote
// keys and work requests use device addresses. An error means "stage
// through host memory": the probe said the device cannot (EOPNOTSUPP on
// Soft-RoCE), or the registration failed.
func (t *Transport) gaudiMR(b datapath.Buf) (*rdma.MR, error) {
	if err := t.dmabufUnsupported(); err != nil {
		return nil, err
	}
	st := b.State()
	st.Mu.Lock()
	defer st.Mu.Unlock()
	r := t.regions(b)
	if r.gmr != nil {
		return r.gmr.mr, nil
	}
	if r.gmrErr != nil {
		return nil, r.gmrErr
	}
	x, err := b.ExportDMABuf()
	if err != nil {
		r.gmrErr = fmt.Errorf("gxfer: export buffer %d as a DMA-BUF: %w", b.ID(), err)
		return nil, r.gmrErr
	}
	drop := func() {
		if x.Release != nil {
			x.Release()
		}
	}
	t.dmabufAttempts.Add(1)
	mr, err := t.nics[0].pd.RegisterDMABuf(x.FD, x.Offset, b.Len(), b.Addr(), rdma.AccessDefault)
	if err != nil {
		drop()
		r.gmrErr = fmt.Errorf("gxfer: ibv_reg_dmabuf_mr of buffer %d (DMA-BUF offset %d): %w", b.ID(), x.Offset, err)
		t.noteDMABufRefusal(r.gmrErr)
		return nil, r.gmrErr
	}
	t.dmabufMRs.Add(1)
	if x.Registered != nil {
		x.Registered()
	}
	r.gmr = &gaudiRegion{mr: mr, release: x.Release}
	return mr, nil
}

// noteDMABufRefusal remembers the first registration the NIC refused as
// unsupported (the reason staged transfers report); other failures are
// the buffer's own.
func (t *Transport) noteDMABufRefusal(err error) {
	if !errors.Is(err, rdma.ErrNotSupported) {
		return
	}
	t.dmabufMu.Lock()
	if t.dmabufErr == nil {
		t.dmabufErr = err
	}
	t.dmabufMu.Unlock()
}

// Export sets k's rkeys for an exported buffer's memory regions on each
// NIC (0 where the buffer is reached through requests to this engine):
// host memory is registered through each NIC's cache, with remote read
// and write, and the references kept until the buffer is freed; Gaudi
// memory needs a DMA-BUF region (on the first NIC only).
func (t *Transport) Export(b datapath.Buf, k *wire.RemoteKey) {
	if b.IsGaudi() {
		if mr, err := t.gaudiMR(b); err == nil {
			k.RKey = mr.RKey()
		}
		return
	}
	st := b.State()
	st.Mu.Lock()
	defer st.Mu.Unlock()
	r := t.regions(b)
	for i, n := range t.nics {
		if r.xref[i].IsZero() {
			ref, err := n.mrs.Get(b.Addr(), b.Len(), rdma.AccessDefault)
			if err != nil {
				t.log.Warn().Err(err).Uint64("buffer", b.ID()).Str("device", n.dev.Name()).Msg("exported without an RDMA key on this NIC: registration failed")
				continue
			}
			r.xref[i] = ref
		}
		if i == 0 {
			k.RKey = r.xref[0].RKey()
		} else {
			k.NICRKeys[i-1] = r.xref[i].RKey()
		}
	}
}

// Revoke does nothing: the regions live until the memory goes (Freeing),
// operations in flight still reaching it.
func (t *Transport) Revoke(datapath.Buf) {}

// Freeing drops a buffer's memory regions before its memory goes.
func (t *Transport) Freeing(b datapath.Buf) error {
	return t.release(b)
}

func (t *Transport) release(b datapath.Buf) error {
	st := b.State()
	st.Mu.Lock()
	defer st.Mu.Unlock()
	t.bufMu.Lock()
	closed := t.closed
	_, had := t.bufs[b]
	delete(t.bufs, b)
	t.bufMu.Unlock()
	r, _ := st.RDMA.(*bufRegions)
	if r == nil || !had {
		if !closed && !b.IsGaudi() {
			t.invalidate(b) // the cache may hold regions of the range (local transfers)
		}
		return nil
	}
	st.RDMA = nil
	var err error
	if r.gmr != nil {
		err = r.gmr.mr.Close()
		if r.gmr.release != nil {
			r.gmr.release()
		}
	}
	for i, n := range t.nics {
		if !r.xref[i].IsZero() {
			n.mrs.Put(r.xref[i])
		}
	}
	if !b.IsGaudi() {
		t.invalidate(b)
	}
	return err
}

// invalidate tells every NIC's cache that b's memory goes.
func (t *Transport) invalidate(b datapath.Buf) {
	for _, n := range t.nics {
		n.mrs.Invalidate(b.Addr(), b.Len())
	}
}
