package engine_test

import (
	"bytes"
	"context"
	"fmt"

	"github.com/gxfer/gxfer/dma/hlsim"
	"github.com/gxfer/gxfer/engine"
)

// Attach mode: the Habana runtime owns the device and its HBM pool; gxfer
// borrows the device, registers a tensor of the pool and moves it with
// the runtime's copier, submitting nothing on the borrowed fd. Here
// dma/hlsim plays the runtime; in a real process the target is
// dma.BorrowFD(fd) (or the zero value: look the runtime up), the anchor
// comes from SCAL's "global_hbm" pool and the copier wraps
// synMemCopyAsync.
func ExampleEngine_Attach() {
	sim, _ := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi2, DRAMSize: 256 << 20})
	defer sim.Close()
	rt, _ := sim.NewRuntime(hlsim.RuntimeConfig{PoolSize: 64 << 20}) // opens the device, ALLOC + MAP
	defer rt.Close()

	eng, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()
	att, err := eng.Attach(engine.AttachConfig{Target: rt.Target(), Anchor: rt.Anchor(), Copier: rt})
	if err != nil {
		fmt.Println(err)
		return
	}
	tensor, _ := att.Register(rt.Anchor().PoolStart+1<<20, 4096) // a tensor's device VA and size
	host, _ := eng.Alloc(4096, engine.Host)
	copy(host.Bytes(), "kv cache block")
	ctx := context.Background()
	if err := eng.CopySync(ctx, tensor.All(), host.All()); err != nil { // through the runtime's copier
		fmt.Println(err)
		return
	}
	back, _ := eng.Alloc(4096, engine.Host)
	_ = eng.CopySync(ctx, back.All(), tensor.All())
	fmt.Println(string(bytes.TrimRight(back.Bytes(), "\x00")))
	fmt.Println("mode attached:", eng.Devices()[0].Attached, "lent by", eng.Devices()[0].LentBy)
	fmt.Println("CS by gxfer on the borrowed fd:", rt.Stats().LentCS)
	_ = att.Detach() // closes the pool's DMA-BUF: the runtime may now unmap
	fmt.Println("runtime unmap after detach:", rt.Unmap())
	// Output:
	// kv cache block
	// mode attached: true lent by hlsim runtime
	// CS by gxfer on the borrowed fd: 0
	// runtime unmap after detach: <nil>
}
