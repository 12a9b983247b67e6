// Command batch submits many small copies as one unit (a Batch): the engine
// coalesces them into few command submissions and reports per-copy status.
package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/gxfer/gxfer/engine"
)

func main() {
	if err := run(os.Stdout, engine.Config{}, nil); err != nil {
		fmt.Fprintln(os.Stderr, "batch:", err)
		os.Exit(1)
	}
}

// run scatters 256 blocks to device memory in one batch, gathers them back
// in another and verifies every byte. tamper, if set (tests), runs between
// the two with the device buffer.
func run(w io.Writer, cfg engine.Config, tamper func(*engine.Engine, *engine.Buffer) error) error {
	eng, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer eng.Close()
	if eng.NumDevices() == 0 {
		return fmt.Errorf("no Gaudi device (real or emulated)")
	}
	if d := eng.Devices()[0]; d.Emulated {
		fmt.Fprintf(w, "device 0: %s %s (emulated)\n", d.Model, d.Name)
	} else {
		fmt.Fprintf(w, "device 0: %s %s\n", d.Model, d.Name)
	}
	const blocks, block = 256, 16 << 10 // e.g. 256 KV-cache blocks of 16 KiB
	host, err := eng.Alloc(blocks*block, engine.Host)
	if err != nil {
		return err
	}
	hbm, err := eng.Alloc(blocks*block, engine.Gaudi(0))
	if err != nil {
		return err
	}
	// Each block's bytes are its own (byte(i) alone repeats every 256
	// bytes, which would make all blocks alike and a block landing in
	// another's slot invisible to the check below).
	for i := range host.Bytes() {
		host.Bytes()[i] = byte(i + i/block)
	}
	ctx := context.Background()
	b := eng.NewBatch()
	// Scatter: block i goes to slot (i*37)%blocks on the device.
	for i := 0; i < blocks; i++ {
		slot := (i * 37) % blocks
		b.Copy(hbm.Slice(slot*block, block), host.Slice(i*block, block))
	}
	f := b.Submit(ctx)
	if err := f.Wait(ctx); err != nil {
		return err
	}
	failed := 0
	for _, e := range f.Errs() {
		if e != nil {
			failed++
		}
	}
	st := eng.Stats()
	fmt.Fprintf(w, "%d copies in %d command submission(s), %d packets, %d failed\n", blocks, st.CommandSubmissions, st.Packets, failed)
	if tamper != nil {
		if err := tamper(eng, hbm); err != nil {
			return err
		}
	}
	// Gather every block back to its place, in one batch, and check all.
	back, err := eng.Alloc(blocks*block, engine.Host)
	if err != nil {
		return err
	}
	for i := 0; i < blocks; i++ {
		slot := (i * 37) % blocks
		b.Copy(back.Slice(i*block, block), hbm.Slice(slot*block, block))
	}
	if err := b.Submit(ctx).Wait(ctx); err != nil {
		return err
	}
	got, want := back.Bytes(), host.Bytes()
	for i := 0; i < blocks; i++ {
		g, h := got[i*block:(i+1)*block], want[i*block:(i+1)*block]
		if bytes.Equal(g, h) {
			continue
		}
		for k := range g {
			if g[k] != h[k] {
				return fmt.Errorf("block %d byte %d: got %d, want %d", i, k, g[k], h[k])
			}
		}
	}
	fmt.Fprintf(w, "all %d blocks verified\n", blocks)
	return nil
}
