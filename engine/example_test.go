package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gxfer/gxfer/engine"
)

// Copy host memory to a Gaudi (the emulated one when none is present) and
// back, asynchronously and synchronously.
func Example() {
	eng, err := engine.New(engine.Config{Devices: engine.DevicesEmulated, Emulator: engine.EmulatorConfig{DRAMSize: 256 << 20}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()
	host, _ := eng.Alloc(1<<20, engine.Host)
	hbm, _ := eng.Alloc(1<<20, engine.Gaudi(0))
	back, _ := eng.Alloc(1<<20, engine.Host)
	copy(host.Bytes(), "hello, gaudi")

	ctx := context.Background()
	f := eng.Copy(ctx, hbm.All(), host.All()) // returns at once
	<-f.Done()                                // closed exactly once
	fmt.Println("h2d:", f.Err())
	fmt.Println("d2h:", eng.CopySync(ctx, back.All(), hbm.All()))
	fmt.Println(string(back.Bytes()[:12]), eng.Devices()[0].Emulated)
	// Output:
	// h2d: <nil>
	// d2h: <nil>
	// hello, gaudi true
}

// A batch submits many copies as one unit with per-copy status.
func ExampleBatch() {
	eng, err := engine.New(engine.Config{Devices: engine.DevicesEmulated, Emulator: engine.EmulatorConfig{DRAMSize: 256 << 20}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer eng.Close()
	host, _ := eng.Alloc(64<<10, engine.Host)
	hbm, _ := eng.Alloc(64<<10, engine.Gaudi(0))
	b := eng.NewBatch()
	for i := 0; i < 16; i++ {
		b.Copy(hbm.Slice(i*4096, 4096), host.Slice(i*4096, 4096))
	}
	b.Copy(hbm.Slice(0, 8), host.Slice(0, 16)) // invalid: nothing is submitted
	f := b.Submit(context.Background())
	<-f.Done()
	fmt.Println(f.Errs()[16] != nil, len(f.Errs()))
	// Output: true 17
}

// Two engines connected over a unix socket: the listener exports a buffer,
// the dialer puts into it and reads it back. (In real use they are two
// processes; see examples/ipc.)
func ExampleEndpoint() {
	cfg := engine.Config{Devices: engine.DevicesNone}
	owner, _ := engine.New(cfg)
	defer owner.Close()
	user, _ := engine.New(cfg)
	defer user.Close()

	dir, _ := os.MkdirTemp("", "gxfer-example")
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "owner.sock")
	ln, err := owner.Listen("unix", sock)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	shared, _ := owner.Alloc(4096, engine.Host)
	key, _ := shared.Export() // bytes to hand to the peer
	keyBytes := key.Bytes()   // ... sent out of band ...
	remote, _ := engine.ParseRemoteKey(keyBytes)

	ctx := context.Background()
	ep, err := user.Dial(ctx, "unix", sock)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ep.Close()
	msg, _ := user.Alloc(5, engine.Host)
	copy(msg.Bytes(), "hello")
	fmt.Println(ep.PutSync(ctx, msg.All(), remote.Slice(100, 5)))
	fmt.Println(string(shared.Bytes()[100:105]))
	// Output:
	// <nil>
	// hello
}

// A Binding checks and imports once; each Put is then a copy into the
// peer's memory (for many small messages to one place).
func ExampleEndpoint_Bind() {
	cfg := engine.Config{Devices: engine.DevicesNone}
	owner, _ := engine.New(cfg)
	defer owner.Close()
	user, _ := engine.New(cfg)
	defer user.Close()
	dir, _ := os.MkdirTemp("", "gxfer-example")
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "owner.sock")
	ln, err := owner.Listen("unix", sock)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	inbox, _ := owner.Alloc(8, engine.Host)
	key, _ := inbox.Export()

	ctx := context.Background()
	ep, err := user.Dial(ctx, "unix", sock)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ep.Close()
	msg, _ := user.Alloc(8, engine.Host)
	b, err := ep.Bind(ctx, msg.All(), key)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	for i := byte(1); i <= 3; i++ {
		msg.Bytes()[0] = i
		_ = b.Put()
	}
	fmt.Println(inbox.Bytes()[0])
	// Output: 3
}

// Endpoints over TCP reach engines on other nodes; the owner's Gaudi
// memory is written by its DMA engine from the bytes that arrive.
func ExampleEngine_Dial_tcp() {
	owner, _ := engine.New(engine.Config{EmulatedCount: 1})
	defer owner.Close()
	user, _ := engine.New(engine.Config{Devices: engine.DevicesNone})
	defer user.Close()

	ln, err := owner.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	hbm, _ := owner.Alloc(4096, engine.Gaudi(0))
	key, _ := hbm.Export()
	remote, _ := engine.ParseRemoteKey(key.Bytes()) // sent out of band

	ctx := context.Background()
	ep, err := user.Dial(ctx, "tcp", ln.Addr(), engine.WithTransport(engine.TransportTCP))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ep.Close()
	msg, _ := user.Alloc(5, engine.Host)
	copy(msg.Bytes(), "hello")
	fmt.Println(ep.Transport(), ep.PutSync(ctx, msg.All(), remote.Slice(100, 5)))
	back, _ := user.Alloc(5, engine.Host)
	fmt.Println(ep.GetSync(ctx, back.All(), remote.Slice(100, 5)), string(back.Bytes()))
	// Output:
	// tcp <nil>
	// <nil> hello
}

// Over RDMA a Binding prepares the registration, the peer's address and
// the work request once: PutN streams writes (up to 128 in flight) and
// Flush waits for them. (Not run here: it needs an RDMA device, and
// examples/rdma runs the same in the Soft-RoCE VM.)
func ExampleBinding_PutN() {
	cfg := engine.Config{Devices: engine.DevicesNone}
	owner, _ := engine.New(cfg)
	defer owner.Close()
	user, _ := engine.New(cfg)
	defer user.Close()
	ln, err := owner.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	inbox, _ := owner.Alloc(64<<10, engine.Host)
	key, _ := inbox.Export()

	ctx := context.Background()
	ep, err := user.Dial(ctx, "tcp", ln.Addr(), engine.WithTransport(engine.TransportRDMA))
	if err != nil {
		fmt.Println(err) // no RDMA device: the reason
		return
	}
	defer ep.Close()
	msg, _ := user.Alloc(64<<10, engine.Host)
	b, err := ep.Bind(ctx, msg.All(), key)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer b.Close()
	if err := b.PutN(1000); err != nil {
		fmt.Println(err)
		return
	}
	if err := b.Flush(); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ep.Stats().ZeroCopy)
}

// Two NICs per node: this engine's rxe0 and rxe2 reach the peer's rxe1
// and rxe3 (NIC i to NIC i). The endpoint has a queue pair on each, the
// peer's keys carry an rkey for each, and a Put of 1 MiB or more between
// host memory is sliced over both. (Compiled, not run: it needs the
// devices; examples/rdma -nics runs it in the Soft-RoCE VM.)
func ExampleRDMAConfig_devices() {
	owner, err := engine.New(engine.Config{Devices: engine.DevicesNone, RDMA: engine.RDMAConfig{Devices: []string{"rxe1", "rxe3"}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer owner.Close()
	user, err := engine.New(engine.Config{Devices: engine.DevicesNone, RDMA: engine.RDMAConfig{Devices: []string{"rxe0", "rxe2"}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer user.Close()
	fmt.Println(user.RDMA().NICs)
	ln, err := owner.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	dst, _ := owner.Alloc(16<<20, engine.Host)
	key, _ := dst.Export()

	ctx := context.Background()
	ep, err := user.Dial(ctx, "tcp", ln.Addr(), engine.WithTransport(engine.TransportRDMA))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ep.Close()
	src, _ := user.Alloc(16<<20, engine.Host)
	if err := ep.PutSync(ctx, src.All(), key); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ep.Stats().NICWRs) // work requests posted on each NIC
}
