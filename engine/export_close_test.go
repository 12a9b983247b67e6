package engine

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/wire"
)

// hooksRecorder is a transport that keeps per-buffer state as the RDMA
// transport does (an export registers the buffer's memory, Freeing
// drops the registration, Finish comes last), recording what the engine
// told it; park (if set) runs inside the first Export.
type hooksRecorder struct {
	mu       sync.Mutex
	reg      map[uint64]bool // buffers registered by an Export, not dropped
	freed    map[uint64]bool // buffers Freeing was called for
	finished bool
	late     []string // exports after the buffer's Freeing or after Finish
	park     func()
	once     sync.Once
}

func (h *hooksRecorder) Kind() datapath.Kind { return datapath.Kind(100) }
func (h *hooksRecorder) Connect(context.Context, datapath.Ctrl) (datapath.Path, error) {
	return nil, errors.New("hooksRecorder: no data path")
}
func (h *hooksRecorder) Close() error { return nil }

func (h *hooksRecorder) Export(b datapath.Buf, _ *wire.RemoteKey) {
	if h.park != nil {
		h.once.Do(h.park)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.finished:
		h.late = append(h.late, "export after Finish")
	case h.freed[b.ID()]:
		h.late = append(h.late, "export after the buffer's Freeing")
	}
	h.reg[b.ID()] = true
}

func (h *hooksRecorder) Revoke(datapath.Buf) {}

func (h *hooksRecorder) Freeing(b datapath.Buf) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.freed[b.ID()] = true
	delete(h.reg, b.ID())
	return nil
}

func (h *hooksRecorder) Finish() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.finished = true
	return nil
}

// TestExportDuringClose: a Buffer.Export that began before Close either
// fails with ErrClosed or ends before Close frees its buffer: the
// transports never see the export of a buffer they were told is gone
// (over RDMA: a memory region registered for memory Close unmapped, or
// after Finish closed the NICs, left registered), and nothing an export
// registered is left once Close returned. The export is parked inside
// the transports' hook; Export used to run outside the close gate, and
// Close returned while it was parked.
func TestExportDuringClose(t *testing.T) {
	for _, loc := range []Location{Host, Gaudi(0)} {
		t.Run(loc.String(), func(t *testing.T) {
			e, err := New(Config{Devices: DevicesEmulated, Emulator: EmulatorConfig{DRAMSize: 256 << 20}})
			require.NoError(t, err)
			b, err := e.Alloc(64<<10, loc)
			require.NoError(t, err)
			parked, resume := make(chan struct{}), make(chan struct{})
			h := &hooksRecorder{reg: map[uint64]bool{}, freed: map[uint64]bool{}, park: func() { close(parked); <-resume }}
			e.transports.Register(h)
			waited := closeWhileParked(t, e, func() error {
				_, err := b.Export()
				return err
			}, parked, resume)
			h.mu.Lock()
			late, reg := h.late, len(h.reg)
			h.mu.Unlock()
			require.Empty(t, late, "the transports saw an export of a buffer Close had freed")
			require.Zero(t, reg, "an export's registration outlived Close")
			require.True(t, waited, "Close returned while an export was in flight")
		})
	}
}
