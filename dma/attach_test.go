package dma

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/internal/hlsys"
	"github.com/gxfer/gxfer/internal/synapse"
)

func TestPlanAttach(t *testing.T) {
	const pg = 4096
	const va = 0x1001_0000_0000_0000
	for _, tc := range []struct {
		name    string
		model   Model
		api     string
		honored bool
		a       PoolAnchor
		want    attachPlan
		kind    error
	}{
		{"6.7+ pool at the map VA", ModelGaudi2, ExportAPIAddr, true, PoolAnchor{MapVA: va, PoolStart: va, PoolLen: 8 << 20},
			attachPlan{addr: va, size: 8 << 20, api: ExportAPIAddr}, nil},
		{"6.7+ carved pool: kernel offset, page remainder carried", ModelGaudi2, ExportAPIAddr, true, PoolAnchor{MapVA: va, PoolStart: va + 3*pg + 100, PoolLen: 2 * pg},
			attachPlan{addr: va, size: 3 * pg, kOffset: 3 * pg, carry: 100, api: ExportAPIAddr}, nil},
		{"6.3-6.6 carved pool: offset 0, whole difference carried", ModelGaudi2, ExportAPIAddr, false, PoolAnchor{MapVA: va, PoolStart: va + 3*pg + 100, PoolLen: 2 * pg},
			attachPlan{addr: va, size: 6 * pg, carry: 3*pg + 100, api: ExportAPIAddr}, nil},
		{"size rounded up to a page multiple", ModelGaudi2, ExportAPIAddr, true, PoolAnchor{MapVA: va, PoolStart: va, PoolLen: 1},
			attachPlan{addr: va, size: pg, api: ExportAPIAddr}, nil},
		{"6.1 API needs the handle", ModelGaudi2, ExportAPI61, false, PoolAnchor{MapVA: va, PoolStart: va, PoolLen: pg}, attachPlan{}, ErrNotSupported},
		{"pool before the map VA", ModelGaudi2, ExportAPIAddr, true, PoolAnchor{MapVA: va, PoolStart: va - pg, PoolLen: pg}, attachPlan{}, ErrInvalid},
		{"unaligned map VA", ModelGaudi2, ExportAPIAddr, true, PoolAnchor{MapVA: va + 8, PoolStart: va + 8, PoolLen: pg}, attachPlan{}, ErrInvalid},
		{"empty pool", ModelGaudi2, ExportAPIAddr, true, PoolAnchor{MapVA: va, PoolStart: va, PoolLen: 0}, attachPlan{}, ErrInvalid},
		{"wrapping pool", ModelGaudi2, ExportAPIAddr, true, PoolAnchor{MapVA: va, PoolStart: va, PoolLen: ^uint64(0)}, attachPlan{}, ErrInvalid},
		{"Gaudi1 physical, 6.1", ModelGaudi1, ExportAPI61, false, PoolAnchor{MapVA: 0, PoolStart: 0x6_2000_0000 + 10, PoolLen: pg},
			attachPlan{addr: 0x6_2000_0000, size: 2 * pg, carry: 10, api: ExportAPI61}, nil},
		{"Gaudi1 physical, addr API", ModelGaudi1, ExportAPIAddr, false, PoolAnchor{MapVA: 0x6_2000_0000, PoolStart: 0x6_2000_0000, PoolLen: pg},
			attachPlan{addr: 0x6_2000_0000, size: pg, api: ExportAPIAddr}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := planAttach(tc.model, tc.api, tc.honored, tc.a, pg)
			if tc.kind != nil {
				require.ErrorIs(t, err, tc.kind)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, p)
			require.Zero(t, p.size%pg, "export size must be a page multiple")
			require.GreaterOrEqual(t, p.size, p.carry+tc.a.PoolLen, "the DMA-BUF covers the pool")
		})
	}
}

// attachCase is one emulated runtime setup.
type attachCase struct {
	model  hlsim.Model
	kernel string
	offset uint64 // pool start - MAP VA
}

func (c attachCase) String() string {
	return fmt.Sprintf("%v/kernel %s/pool offset %#x", c.model, c.kernel, c.offset)
}

func attachCases() []attachCase {
	var cs []attachCase
	for _, k := range []string{"6.5", "6.8"} {
		for _, off := range []uint64{0, 3<<20 + 4096 + 100} {
			cs = append(cs, attachCase{hlsim.ModelGaudi2, k, off})
		}
		cs = append(cs, attachCase{hlsim.ModelGaudi1, k, 8192 + 100})
	}
	return append(cs, attachCase{hlsim.ModelGaudi1, "6.1", 0})
}

func newRuntime(t *testing.T, c attachCase) (*hlsim.Device, *hlsim.Runtime) {
	t.Helper()
	sim, err := hlsim.New(hlsim.Config{Model: c.model, DRAMSize: 256 << 20, Kernel: c.kernel})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, sim.Close()) })
	rt, err := sim.NewRuntime(hlsim.RuntimeConfig{PoolSize: 16 << 20, PoolOffset: c.offset})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, rt.Close()) })
	return sim, rt
}

// An attached gxfer registers a buffer by its offset in the one pool
// export: an importer reading the DMA-BUF at that offset (what
// ibv_reg_dmabuf_mr would map) sees the buffer's bytes, on 6.3-6.6 (offset
// ignored by the driver) as on 6.7+. Through the lent handle gxfer made
// one export and nothing else: no CS, no memory op, no close.
func TestAttachRegionReadsTheRightBytes(t *testing.T) {
	for _, c := range attachCases() {
		t.Run(c.String(), func(t *testing.T) {
			sim, rt := newRuntime(t, c)
			an := rt.Anchor()
			pattern := make([]byte, 3<<20)
			for i := range pattern {
				pattern[i] = byte(i*7 + i>>12)
			}
			tensor := an.PoolStart + 5<<20 + 64 // a tensor inside the pool, not page aligned
			require.NoError(t, rt.CopyHostToDevice(context.Background(), tensor, pattern))

			at, err := Attach(rt.Target(), an, AttachOptions{})
			require.NoError(t, err)
			defer func() { require.NoError(t, at.Detach()) }()
			require.Equal(t, "hlsim runtime", at.Source())
			x := at.Export()
			require.Zero(t, x.Size%uint64(os.Getpagesize()))

			reg, err := at.Region(tensor, uint64(len(pattern)))
			require.NoError(t, err)
			view, err := sim.DMABufView(reg.FD)
			require.NoError(t, err)
			got := make([]byte, len(pattern))
			n, err := view.ReadAt(reg.FD, got, reg.Offset)
			require.NoError(t, err)
			require.Equal(t, len(got), n)
			require.True(t, bytes.Equal(pattern, got), "the importer reads other bytes at the registration offset")

			st := rt.Stats()
			require.Zero(t, st.LentCS, "no CS, WAIT_CS or CB through the borrowed fd")
			require.Zero(t, st.LentMemOps)
			require.Zero(t, st.LentCloses)
			require.Zero(t, st.LentMmaps)
			require.EqualValues(t, 1, st.LentExports, "the pool is exported once")
			require.Zero(t, sim.Stats().CSSubmitted, "the device saw no CS at all")
		})
	}
}

func TestAttachRegionRefusals(t *testing.T) {
	_, rt := newRuntime(t, attachCase{hlsim.ModelGaudi2, "6.8", 0})
	an := rt.Anchor()
	at, err := Attach(rt.Target(), an, AttachOptions{})
	require.NoError(t, err)
	end := an.PoolStart + an.PoolLen
	for _, tc := range []struct {
		name  string
		va, n uint64
		kind  error
	}{
		{"before the pool", an.PoolStart - 1, 2, ErrNotInPool},
		{"past the end", end - 10, 11, ErrNotInPool},
		{"at the end", end, 1, ErrNotInPool},
		{"huge", an.PoolStart, ^uint64(0), ErrNotInPool},
		{"empty", an.PoolStart, 0, ErrInvalid},
	} {
		_, err := at.Region(tc.va, tc.n)
		require.ErrorIs(t, err, tc.kind, tc.name)
	}
	require.NoError(t, at.Detach())
	require.NoError(t, at.Detach(), "idempotent")
	_, err = at.Region(an.PoolStart, 1)
	require.ErrorIs(t, err, ErrDetached)
	_, err = at.DupDMABuf()
	require.ErrorIs(t, err, ErrDetached)
	require.False(t, at.Export().Live)
}

// The runtime's device release waits on gxfer's exports: UNMAP fails while
// gxfer is attached and succeeds once it has detached; the runtime's
// context is still usable (gxfer never closed it).
func TestDetachReleasesTheExport(t *testing.T) {
	for _, k := range []string{"6.5", "6.8"} {
		t.Run(k, func(t *testing.T) {
			_, rt := newRuntime(t, attachCase{hlsim.ModelGaudi2, k, 1 << 20})
			at, err := Attach(rt.Target(), rt.Anchor(), AttachOptions{})
			require.NoError(t, err)
			dup, err := at.DupDMABuf()
			require.NoError(t, err)

			require.ErrorIs(t, rt.Unmap(), unix.EINVAL, "UNMAP while gxfer holds the export")
			require.NoError(t, at.Detach())
			require.ErrorIs(t, rt.Unmap(), unix.EINVAL, "a duplicate handed out still pins the pool")
			require.NoError(t, dup.Close())
			require.NoError(t, rt.Unmap(), "UNMAP after Detach")
			require.NoError(t, rt.Usable(), "the runtime's context is still open")
			require.Zero(t, rt.Stats().LentCloses)
		})
	}
}

func TestAttachRefusals(t *testing.T) {
	t.Run("6.1 Gaudi2", func(t *testing.T) {
		_, rt := newRuntime(t, attachCase{hlsim.ModelGaudi2, "6.1", 0})
		_, err := Attach(rt.Target(), rt.Anchor(), AttachOptions{})
		require.ErrorIs(t, err, ErrNotSupported)
		require.Zero(t, rt.Stats().LentExports)
	})
	t.Run("anchor that is not a MAP VA", func(t *testing.T) {
		_, rt := newRuntime(t, attachCase{hlsim.ModelGaudi2, "6.8", 0})
		a := rt.Anchor()
		a.MapVA += 1 << 20
		a.PoolStart += 1 << 20
		a.PoolLen = 1 << 20
		_, err := Attach(rt.Target(), a, AttachOptions{})
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorIs(t, err, unix.EINVAL, "the driver's exact-VA lookup refuses it")
	})
	t.Run("device in malfunction", func(t *testing.T) {
		// ErrMalfunction's contract: DEVICE_STATUS MALFUNCTION or
		// NEEDS_RESET (the state does not end by itself), as Open says.
		sim, rt := newRuntime(t, attachCase{hlsim.ModelGaudi2, "6.8", 0})
		sim.ForceStatus(hlsys.DeviceStatusMalfunction)
		defer sim.ForceStatus(hlsys.DeviceStatusOperational)
		_, err := Attach(rt.Target(), rt.Anchor(), AttachOptions{})
		require.ErrorIs(t, err, ErrNotOperational)
		require.ErrorIs(t, err, ErrMalfunction)
		require.Zero(t, rt.Stats().LentExports)
	})
	t.Run("fd that is not a habanalabs node", func(t *testing.T) {
		f, err := os.Open("/dev/null")
		require.NoError(t, err)
		defer f.Close()
		_, err = Attach(BorrowFD(int(f.Fd())), PoolAnchor{PoolLen: 1}, AttachOptions{})
		require.ErrorIs(t, err, ErrInvalid)
		_, err = f.Stat()
		require.NoError(t, err, "the borrowed fd stays open")
	})
	t.Run("no fd and no runtime in this process", func(t *testing.T) {
		_, err := Attach(AttachTarget{}, PoolAnchor{PoolLen: 1}, AttachOptions{})
		require.ErrorIs(t, err, ErrNoRuntime)
		require.ErrorIs(t, err, synapse.ErrNotFound)
		var se *synapse.Error
		require.True(t, errors.As(err, &se))
		require.Contains(t, se.Reason, "libSynapse.so")
	})
}
