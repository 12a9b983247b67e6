package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/gxfer/gxfer/engine"
)

func init() {
	RegisterTransport(Transport{Name: "local", Desc: "copies inside this process: memmove, the Gaudi's DMA engines (h2d, d2h, d2d)"})
	RegisterTransport(Transport{Name: "ipc", Label: "ipc (unix socket, shared memfd)",
		Desc: "unix socket + memfd/DMA-BUF fd passing, same host"})
	RegisterTransport(Transport{Name: "rdma", Label: "rdma (RC RDMA write/read, control channel over TCP)",
		Desc: "RDMA write/read to a peer on any host (engine endpoint dialed with TransportRDMA; DMA-BUF from Gaudi memory where the NIC takes it)", Unavailable: rdmaNoEngine})
	RegisterTransport(Transport{Name: "tcp", Label: "tcp (engine Data frames over TCP, TCP_NODELAY)",
		Desc: "TCP data path to a peer on any host: Put/Get bytes in Data frames, large transfers over several connections"})

	// The descriptions name no packet: Gaudi1/2 copies are LIN_DMA
	// packets in command submissions, Gaudi3 copies LIN_PDMA packets on
	// user PDMA channels (gxfer info's "DMA path" says which).
	for _, t := range []struct {
		name     string
		src, dst Mem
		desc     string
	}{
		{"h2d", Host, Gaudi, "copy host memory to Gaudi memory (device DMA host to device)"},
		{"d2h", Gaudi, Host, "copy Gaudi memory to host memory (device DMA device to host)"},
		{"d2d", Gaudi, Gaudi, "copy between two buffers of one Gaudi (device DMA device to device)"},
		{"h2h", Host, Host, "copy between two host buffers (memmove; small copies complete inline)"},
	} {
		Register(Test{Name: t.name, Transport: "local", Src: t.src, Dst: t.dst, Desc: t.desc, Prepare: newLocal(t.src, t.dst)})
	}
}

// localCopy copies one source buffer to one destination buffer, both
// allocated once for the message size and reused by every iteration.
type localCopy struct {
	eng      *engine.Engine
	size     int
	src, dst *engine.Buffer
	stage    *engine.Buffer // host buffer to fill or read device memory; nil for h2h
	srcS     engine.Slice
	dstS     engine.Slice
	batch    *engine.Batch
	seed     byte
}

func location(m Mem, env *Env) engine.Location {
	if m == Gaudi {
		return engine.Gaudi(env.Device)
	}
	return engine.Host
}

// newLocal is Prepare for the local tests.
func newLocal(src, dst Mem) func(ctx context.Context, env *Env, size int) (Workload, error) {
	return func(ctx context.Context, env *Env, size int) (_ Workload, err error) {
		eng := env.Engine
		w := &localCopy{eng: eng, size: size, batch: eng.NewBatch(), seed: byte(size*7 + len(src)*3 + len(dst))}
		defer func() {
			if err != nil {
				_ = w.Close()
			}
		}()
		if w.src, err = eng.Alloc(size, location(src, env)); err != nil {
			return nil, fmt.Errorf("allocate %s source: %w", FormatSize(size), err)
		}
		if w.dst, err = eng.Alloc(size, location(dst, env)); err != nil {
			return nil, fmt.Errorf("allocate %s destination: %w", FormatSize(size), err)
		}
		if src == Gaudi || dst == Gaudi {
			if w.stage, err = eng.Alloc(size, engine.Host); err != nil {
				return nil, fmt.Errorf("allocate %s staging buffer: %w", FormatSize(size), err)
			}
		}
		w.srcS, w.dstS = w.src.All(), w.dst.All()
		// The source gets the pattern, the destination its complement, so a
		// copy that moved nothing cannot pass verification.
		if err := w.fill(ctx, w.src, false); err != nil {
			return nil, fmt.Errorf("fill source: %w", err)
		}
		if err := w.fill(ctx, w.dst, true); err != nil {
			return nil, fmt.Errorf("fill destination: %w", err)
		}
		return w, nil
	}
}

// pattern is byte i of the test pattern: never constant, rarely zero, and
// different for every size.
func (w *localCopy) pattern(i int) byte { return byte(i*131+i>>8+i>>16) ^ w.seed | 1 }

func (w *localCopy) fill(ctx context.Context, b *engine.Buffer, complement bool) error {
	host := b
	if b.Location().IsGaudi() {
		host = w.stage
	}
	p := host.Bytes()
	for i := range p {
		v := w.pattern(i)
		if complement {
			v = ^v
		}
		p[i] = v
	}
	if host != b {
		return w.eng.CopySync(ctx, b.All(), host.All())
	}
	return nil
}

// Submit implements Workload.
func (w *localCopy) Submit(ctx context.Context, n int) *engine.Future {
	if n == 1 {
		return w.eng.Copy(ctx, w.dstS, w.srcS)
	}
	for range n {
		w.batch.Copy(w.dstS, w.srcS)
	}
	return w.batch.Submit(ctx)
}

// Verify implements Workload.
func (w *localCopy) Verify(ctx context.Context) error {
	got := w.dst
	if w.dst.Location().IsGaudi() {
		clear(w.stage.Bytes())
		if err := w.eng.CopySync(ctx, w.stage.All(), w.dst.All()); err != nil {
			return fmt.Errorf("read back destination: %w", err)
		}
		got = w.stage
	}
	for i, v := range got.Bytes() {
		if want := w.pattern(i); v != want {
			return fmt.Errorf("verification failed: %s destination byte %d is %#02x, want %#02x", FormatSize(w.size), i, v, want)
		}
	}
	return nil
}

// Close implements Workload.
func (w *localCopy) Close() error {
	var errs []error
	for _, b := range []*engine.Buffer{w.src, w.dst, w.stage} {
		if b != nil {
			errs = append(errs, b.Free())
		}
	}
	return errors.Join(errs...)
}
