// Command batch submits many small copies as one unit (a Batch): the engine
// coalesces them into few command submissions and reports per-copy status.
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/gxfer/gxfer/engine"
)

func main() {
	if err := run(os.Stdout, engine.Config{}); err != nil {
		fmt.Fprintln(os.Stderr, "batch:", err)
		os.Exit(1)
	}
}

func run(w io.Writer, cfg engine.Config) error {
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
	for i := range host.Bytes() {
		host.Bytes()[i] = byte(i)
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
	// Gather back and check one block.
	back, err := eng.Alloc(block, engine.Host)
	if err != nil {
		return err
	}
	if err := eng.CopySync(ctx, back.All(), hbm.Slice(((5*37)%blocks)*block, block)); err != nil {
		return err
	}
	for i, v := range back.Bytes() {
		if v != byte(5*block+i) {
			return fmt.Errorf("block 5 byte %d: got %d", i, v)
		}
	}
	fmt.Fprintln(w, "block 5 verified")
	return nil
}
