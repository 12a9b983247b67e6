// Command devicereset shows what a program sees when the driver resets a
// Gaudi under it, and how it carries on: on the emulated device it hangs
// one command submission, so that the driver's timeout (TDR) resets the
// device. The copy on it fails with engine.ErrDeviceLost, the engine
// releases the device (the driver would kill the process otherwise) and
// opens it again, the old buffer stays lost, and a new buffer moves bytes.
// Fault injection needs the emulator: on real hardware it says so and
// stops.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gxfer/gxfer/engine"
)

func main() {
	cfg := engine.Config{Devices: engine.DevicesEmulated,
		Emulator: engine.EmulatorConfig{CSTimeout: 200 * time.Millisecond}}
	if err := run(os.Stdout, cfg, nil); err != nil {
		fmt.Fprintln(os.Stderr, "devicereset:", err)
		os.Exit(1)
	}
}

// run runs the example. tamper, if set (tests), runs once the new buffer
// holds the bytes, before they are copied back and checked.
func run(w io.Writer, cfg engine.Config, tamper func(*engine.Engine, *engine.Buffer) error) error {
	eng, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer eng.Close()
	emu, err := eng.Emulator(0)
	if err != nil {
		return fmt.Errorf("fault injection needs the emulated device: %w", err)
	}
	d := eng.Devices()[0]
	fmt.Fprintf(w, "gaudi%d: %s, emulated (dma/hlsim), not a real Gaudi\n", d.Index, d.Model)
	ctx := context.Background()
	const size = 1 << 20
	src, err := eng.Alloc(size, engine.Host)
	if err != nil {
		return err
	}
	back, err := eng.Alloc(size, engine.Host)
	if err != nil {
		return err
	}
	// Every 8-byte word is distinct (its offset times an odd constant), so
	// bytes landing at another offset fail the check (byte(i*31) would repeat
	// every 256 bytes).
	for i := 0; i < len(src.Bytes()); i += 8 {
		binary.LittleEndian.PutUint64(src.Bytes()[i:], uint64(i)*0x9e3779b97f4a7c15)
	}
	old, err := eng.Alloc(size, engine.Gaudi(0))
	if err != nil {
		return err
	}
	if err := eng.CopySync(ctx, old.All(), src.All()); err != nil {
		return err
	}
	fmt.Fprintln(w, "copy before the reset: ok")

	emu.HangNextCS(1) // the device never finishes the next submission
	start := time.Now()
	err = eng.CopySync(ctx, old.All(), src.All())
	if !errors.Is(err, engine.ErrDeviceLost) {
		return fmt.Errorf("the hung copy: want ErrDeviceLost, got %v", err)
	}
	fmt.Fprintf(w, "hung copy failed after the CS timeout (%v): device lost\n", time.Since(start).Round(100*time.Millisecond))

	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := eng.WaitDevice(wctx, 0); err != nil {
		return err
	}
	fmt.Fprintf(w, "device opened again (resets: %d)\n", eng.Devices()[0].Resets)

	err = eng.CopySync(ctx, back.All(), old.All())
	fmt.Fprintf(w, "old buffer: lost: %v\n", errors.Is(err, engine.ErrDeviceLost))
	if err := old.Free(); err != nil {
		return err
	}
	fresh, err := eng.Alloc(size, engine.Gaudi(0))
	if err != nil {
		return err
	}
	if err := eng.CopySync(ctx, fresh.All(), src.All()); err != nil {
		return err
	}
	if tamper != nil {
		if err := tamper(eng, fresh); err != nil {
			return err
		}
	}
	if err := eng.CopySync(ctx, back.All(), fresh.All()); err != nil {
		return err
	}
	if !bytes.Equal(src.Bytes(), back.Bytes()) {
		return errors.New("new buffer: the bytes came back different")
	}
	fmt.Fprintln(w, "new buffer: round trip verified")
	return nil
}
