package engine_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gxfer/gxfer/engine"
)

// Test a program's error handling against device faults: an aborted
// command submission, a hung one, and a device reset.
func ExampleEngine_Emulator() {
	eng, err := engine.New(engine.Config{
		Devices:  engine.DevicesEmulated,
		Emulator: engine.EmulatorConfig{DRAMSize: 64 << 20, CSTimeout: time.Second},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()
	emu, err := eng.Emulator(0)
	if err != nil {
		fmt.Println(err) // engine.ErrNotEmulated on real hardware
		return
	}
	host, _ := eng.Alloc(4096, engine.Host)
	hbm, _ := eng.Alloc(4096, engine.Gaudi(0))
	ctx := context.Background()

	emu.AbortNextCS(1)
	err = eng.CopySync(ctx, hbm.All(), host.All())
	fmt.Println("aborted:", errors.Is(err, engine.ErrAborted))

	emu.HangNextCS(1)
	err = eng.CopySync(ctx, hbm.All(), host.All(), engine.Timeout(50*time.Millisecond))
	fmt.Println("hung:", errors.Is(err, engine.ErrTimeout))

	// A device reset (a fatal device error; a hung submission's TDR does
	// the same): the engine releases the device and opens it again, and
	// the buffers of the old context are lost.
	emu.Reset()
	err = eng.CopySync(ctx, hbm.All(), host.All())
	fmt.Println("after reset:", errors.Is(err, engine.ErrDeviceLost))
	if err := eng.WaitDevice(ctx, 0); err != nil {
		fmt.Println(err)
		return
	}
	hbm2, _ := eng.Alloc(4096, engine.Gaudi(0))
	fmt.Println("new buffer:", eng.CopySync(ctx, hbm2.All(), host.All()))
	// Output:
	// aborted: true
	// hung: true
	// after reset: true
	// new buffer: <nil>
}
