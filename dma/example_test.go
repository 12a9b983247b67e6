package dma_test

import (
	"fmt"
	"time"

	"github.com/gxfer/gxfer/dma"
	"github.com/gxfer/gxfer/dma/hlsim"
)

// Example copies host -> device -> host on the emulated Gaudi2. On a real
// machine, dma.Discover("") and dma.Open(nodes[0], opts) replace the
// emulator lines.
func Example() {
	sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi2, DRAMSize: 256 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sim.Close()

	dev, err := dma.OpenBackend(sim.Name(), sim.Open, dma.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close() // releases anything still allocated or mapped
	fmt.Println(dev.Model(), "emulated:", dev.Emulated())

	const n = 1 << 20
	mem, err := dev.AllocDevice(n)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mem.Free()

	// Host buffers for DMA live outside the Go heap and are mapped into the
	// device MMU.
	src, _ := dma.AllocHostPages(n)
	dst, _ := dma.AllocHostPages(n)
	defer dma.FreeHostPages(src)
	defer dma.FreeHostPages(dst)
	hsrc, err := dev.MapHostBytes(src)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer hsrc.Unmap()
	hdst, err := dev.MapHostBytes(dst)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer hdst.Unmap()

	copy(src, "hello, gaudi")
	if err := dev.CopySync(mem.Addr(), hsrc.DeviceAddr(), n); err != nil { // host -> device
		fmt.Println(err)
		return
	}
	if err := dev.CopySync(hdst.DeviceAddr(), mem.Addr(), n); err != nil { // device -> host
		fmt.Println(err)
		return
	}
	fmt.Println(string(dst[:12]))
	// Output:
	// Gaudi2 emulated: true
	// hello, gaudi
}

// ExampleCSBuilder submits several copies as one command submission spread
// over the host-to-device queues, and waits for it.
func ExampleCSBuilder() {
	sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi2, DRAMSize: 256 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sim.Close()
	dev, err := dma.OpenBackend(sim.Name(), sim.Open, dma.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()

	const n = 4 << 20
	mem, err := dev.AllocDevice(n)
	if err != nil {
		fmt.Println(err)
		return
	}
	src, _ := dma.AllocHostPages(n)
	defer dma.FreeHostPages(src)
	hm, err := dev.MapHostBytes(src)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer hm.Unmap()

	pool := dev.NewCBPool(4096, 8)
	defer pool.Close()
	cs, err := dev.NewCSBuilder(dma.CSOptions{
		Queues: dev.H2DQueues(), CBSize: 4096, PieceSize: 1 << 20, NewCB: pool.Get,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	for off := uint64(0); off < n; off += n / 2 {
		if !cs.Fits(n / 2) {
			fmt.Println("CS full")
			return
		}
		if err := cs.AddCopy(mem.Addr()+off, hm.DeviceAddr()+off, n/2); err != nil {
			fmt.Println(err)
			return
		}
	}
	chunks, err := cs.Seal()
	if err != nil {
		fmt.Println(err)
		return
	}
	seq, err := dev.Submit(chunks)
	if err != nil {
		fmt.Println(err)
		return
	}
	st, err := dev.Wait(seq, 10*time.Second)
	cs.Release(pool.Put) // the CS is over: its command buffers may be reused
	fmt.Println(st, err, "packets:", cs.Len(), "queues:", len(chunks))
	// Output:
	// completed <nil> packets: 4 queues: 2
}

// ExampleDevice_CloseRunning gives up on a copy still running and closes
// the device the way that stops it before anything it uses is released:
// the context goes first (the driver resets a device released with CSs
// active), and the mappings and memory are dropped with it.
func ExampleDevice_CloseRunning() {
	sim, err := hlsim.New(hlsim.Config{Model: hlsim.ModelGaudi2, DRAMSize: 512 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sim.Close()
	dev, err := dma.OpenBackend(sim.Name(), sim.Open, dma.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	const n = 256 << 20
	src, _ := dma.AllocHostPages(n)
	defer dma.FreeHostPages(src) // after the device is closed
	hsrc, err := dev.MapHostBytes(src)
	if err != nil {
		fmt.Println(err)
		return
	}
	mem, err := dev.AllocDevice(n)
	if err != nil {
		fmt.Println(err)
		return
	}
	cs, err := dev.NewCSBuilder(dma.CSOptions{Queues: dev.H2DQueues(), CBSize: 64 << 10, PieceSize: 1 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	_ = cs.AddCopy(mem.Addr(), hsrc.DeviceAddr(), n)
	chunks, _ := cs.Seal()
	seq, err := dev.Submit(chunks)
	if err != nil {
		fmt.Println(err)
		return
	}
	if st, _ := dev.Wait(seq, time.Millisecond); st != dma.CSCompleted {
		// Not done in time: the caller gives up on it.
		fmt.Println("close:", dev.CloseRunning())
	} else {
		fmt.Println("close:", dev.Close())
	}
	fmt.Println("engine faults:", sim.Stats().EngineFaults)
	// Output:
	// close: <nil>
	// engine faults: 0
}
