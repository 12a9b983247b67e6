// Command attach shows gxfer working beside the Habana runtime (attach
// mode). On a real Gaudi host the framework process (SynapseAI, PyTorch
// on HPU) already holds the device, and the tensors to move are ranges of
// the runtime's one mapped HBM pool. gxfer then opens no device: it
// borrows the runtime's compute fd, exports the pool once as a DMA-BUF,
// registers tensors by their offset in it, and leaves device copies to
// the runtime's own copy call.
//
// Here dma/hlsim plays the runtime: it opens the emulated device,
// allocates and maps the pool and lends gxfer the device and the pool's
// anchor; its copies stand for synMemCopyAsync. In a real process the
// same code takes
//
//	engine.AttachConfig{
//		Target: dma.BorrowFD(fd),        // synDeviceGetInfoV2(...).fd; or leave zero to look it up
//		Anchor: dma.PoolAnchor{MapVA: ..., PoolStart: ..., PoolLen: ...}, // SCAL "global_hbm"
//		Copier: myCopier,                // wraps synMemCopyAsync + synStreamSynchronize
//	}
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/engine"
)

func main() {
	kernel := flag.String("kernel", "6.8", "kernel uAPI the emulated driver presents (6.3-6.6 ignore the DMA-BUF export offset)")
	flag.Parse()
	if err := run(os.Stdout, *kernel, nil); err != nil {
		fmt.Fprintln(os.Stderr, "attach:", err)
		os.Exit(1)
	}
}

// run runs the example on the emulated driver of kernel. tamper, if set
// (tests), runs with the host buffer the copies through the runtime
// brought back, before it is checked.
func run(w io.Writer, kernel string, tamper func(back []byte)) (err error) {
	ctx := context.Background()

	// The runtime: it owns the device and one HBM pool, which here starts
	// 2 MiB + 4 KiB into its allocation (a pool carved out of a larger
	// mapping, as SCAL's pools on Gaudi2).
	sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi2, DRAMSize: 512 << 20, Kernel: kernel})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, sim.Close()) }()
	rt, err := sim.NewRuntime(hlsim.RuntimeConfig{PoolSize: 128 << 20, PoolOffset: 2<<20 + 4096})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, rt.Close()) }()
	an := rt.Anchor()
	fmt.Fprintf(w, "runtime (emulated by dma/hlsim, kernel %s): pool %#x, %d MiB, mapped at %#x\n", kernel, an.PoolStart, an.PoolLen>>20, an.MapVA)

	// gxfer: no device of its own; attached to the runtime's.
	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone, RDMA: engine.RDMAConfig{Disabled: true}})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, eng.Close()) }()
	att, err := eng.Attach(engine.AttachConfig{Target: rt.Target(), Anchor: an, Copier: rt})
	if err != nil {
		return err
	}
	x := att.Stats().Export
	fmt.Fprintf(w, "attached: pool exported once (%d MiB DMA-BUF, kernel offset %d, pool at DMA-BUF offset %d)\n", x.Size>>20, x.KernelOffset, x.PoolOffset)

	// Two "tensors" of the runtime (their device VAs would come from
	// habana_frameworks' _data_ptr).
	const n = 4 << 20
	kv, err := att.Register(an.PoolStart+1<<20, n)
	if err != nil {
		return err
	}
	kv2, err := att.Register(an.PoolStart+64<<20, n)
	if err != nil {
		return err
	}
	d, err := kv.ExportDMABuf()
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "tensor at %#x: DMA-BUF fd %d, offset %d (what ibv_reg_dmabuf_mr or an IPC peer is given)\n", kv.Addr(), d.FD().Int(), d.Offset())
	d.Release()

	// Local copies go through the runtime's copier.
	src, err := eng.Alloc(n, engine.Host)
	if err != nil {
		return err
	}
	back, err := eng.Alloc(n, engine.Host)
	if err != nil {
		return err
	}
	// Every 8-byte word is distinct (its offset times an odd constant), so
	// bytes landing at another offset fail the check (byte(i*13 + i>>10)
	// would repeat every 256 KiB).
	for i := 0; i < len(src.Bytes()); i += 8 {
		binary.LittleEndian.PutUint64(src.Bytes()[i:], uint64(i)*0x9e3779b97f4a7c15)
	}
	if err := eng.CopySync(ctx, kv.All(), src.All()); err != nil {
		return fmt.Errorf("host to tensor: %w", err)
	}
	if err := eng.CopySync(ctx, kv2.All(), kv.All()); err != nil {
		return fmt.Errorf("tensor to tensor: %w", err)
	}
	if err := eng.CopySync(ctx, back.All(), kv2.All()); err != nil {
		return fmt.Errorf("tensor to host: %w", err)
	}
	if tamper != nil {
		tamper(back.Bytes())
	}
	if !bytes.Equal(src.Bytes(), back.Bytes()) {
		return errors.New("copies through the runtime: data differs")
	}
	fmt.Fprintln(w, "host -> tensor -> tensor -> host through the runtime's copier: verified")

	// A put to another engine over TCP: staged through host memory by the
	// copier (RDMA with a DMA-BUF capable NIC would read the tensor in
	// place through its memory region).
	peer, err := engine.New(engine.Config{Devices: engine.DevicesNone, RDMA: engine.RDMAConfig{Disabled: true}})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, peer.Close()) }()
	ln, err := peer.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	dst, err := peer.Alloc(n, engine.Host)
	if err != nil {
		return err
	}
	key, err := dst.Export()
	if err != nil {
		return err
	}
	ep, err := eng.Dial(ctx, "tcp", ln.Addr(), engine.WithTransport(engine.TransportTCP))
	if err != nil {
		return err
	}
	if err := ep.PutSync(ctx, kv.All(), key); err != nil {
		return fmt.Errorf("put the tensor: %w", err)
	}
	if !bytes.Equal(src.Bytes(), dst.Bytes()) {
		return errors.New("put: the peer received other bytes")
	}
	fmt.Fprintln(w, "tensor put to a peer over TCP: verified")

	// What gxfer did on the runtime's device, from the emulator's counters.
	st := rt.Stats()
	fmt.Fprintf(w, "on the borrowed fd: %d exports, %d CS/WAIT/CB ioctls, %d memory ops, %d closes; device CSs: %d; runtime copies: %d\n",
		st.LentExports, st.LentCS, st.LentMemOps, st.LentCloses, sim.Stats().CSSubmitted, st.Copies)

	// Detach closes the export: the runtime can then unmap its pool.
	if err := att.Detach(); err != nil {
		return err
	}
	if err := rt.Unmap(); err != nil {
		return fmt.Errorf("the runtime cannot unmap its pool after Detach: %w", err)
	}
	fmt.Fprintln(w, "detached; the runtime unmapped its pool")
	return nil
}
