package engine_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/gxfer/gxfer/engine"
)

// Caller memory (here a Go slice) made usable in transfers: Register once
// (the device mapping is made on first use and cached), copy to and from
// Gaudi memory, and Deregister when done; the memory must stay in place
// until then. Registered memory is never exported: peers reach memory
// from Alloc.
func ExampleEngine_Register() {
	eng, err := engine.New(engine.Config{Devices: engine.DevicesEmulated, Emulator: engine.EmulatorConfig{DRAMSize: 64 << 20}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()
	mine := make([]byte, 4096)
	copy(mine, "caller memory")
	buf, err := eng.Register(mine)
	if err != nil {
		fmt.Println(err)
		return
	}
	hbm, _ := eng.Alloc(4096, engine.Gaudi(0))

	ctx := context.Background()
	fmt.Println(eng.CopySync(ctx, hbm.All(), buf.All()))
	clear(mine)
	fmt.Println(eng.CopySync(ctx, buf.Slice(0, 13), hbm.Slice(0, 13)), string(mine[:13]))
	_, err = buf.Export()
	fmt.Println(errors.Is(err, engine.ErrNotSupported))
	fmt.Println(buf.Deregister())
	err = eng.CopySync(ctx, buf.All(), hbm.All())
	fmt.Println(errors.Is(err, engine.ErrFreed))
	// Output:
	// <nil>
	// <nil> caller memory
	// true
	// <nil>
	// true
}
