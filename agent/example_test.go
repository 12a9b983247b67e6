package agent_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gxfer/gxfer/agent"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// Two agents in one process (in real use: two processes or machines).
// "target" offers a section by name; "client" finds it by address, writes
// two blocks into it with one request and a notification, which target
// receives once the bytes are in its memory.
func ExampleAgent() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "gxfer-example")
	defer os.RemoveAll(dir)
	cfg := engine.Config{Devices: engine.DevicesNone}

	teng, _ := engine.New(cfg)
	defer teng.Close()
	target, err := agent.New(ctx, agent.Config{Name: "target", Engine: teng, Unix: filepath.Join(dir, "target.sock")})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer target.Close()
	mem, _ := teng.Alloc(1<<20, engine.Host)
	_ = target.Publish("inbox", mem.All())

	ceng, _ := engine.New(cfg)
	defer ceng.Close()
	client, _ := agent.New(ctx, agent.Config{Name: "client", Engine: ceng})
	defer client.Close()
	name, err := client.Connect(ctx, target.Metadata().Unix)
	if err != nil {
		fmt.Println(err)
		return
	}
	src, _ := ceng.Alloc(4096, engine.Host)
	copy(src.Bytes(), "hello, world")
	x := client.Write(ctx, name, []agent.Desc{
		{Local: src.Slice(0, 5), Section: "inbox", Off: 100},
		{Local: src.Slice(7, 5), Section: "inbox", Off: 200},
	}, agent.WithNotify([]byte("two blocks")))
	fmt.Println(x.Wait(ctx))

	n, _ := target.Recv(ctx)
	fmt.Printf("%s from %s: %s %s\n", n.Msg, n.From, mem.Bytes()[100:105], mem.Bytes()[200:205])
	// Output:
	// <nil>
	// two blocks from client: hello world
}

// Prepared lists: checked once, then any subset posted by index.
func ExamplePrepared() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "gxfer-example")
	defer os.RemoveAll(dir)
	cfg := engine.Config{Devices: engine.DevicesNone}
	teng, _ := engine.New(cfg)
	defer teng.Close()
	target, _ := agent.New(ctx, agent.Config{Name: "target", Engine: teng, Unix: filepath.Join(dir, "t.sock")})
	defer target.Close()
	kv, _ := teng.Alloc(16*4096, engine.Host)
	_ = target.Publish("kv", kv.All())

	ceng, _ := engine.New(cfg)
	defer ceng.Close()
	client, _ := agent.New(ctx, agent.Config{Name: "client", Engine: ceng})
	defer client.Close()
	_, _ = client.Connect(ctx, target.Metadata().Unix)

	blocks, _ := ceng.Alloc(4*4096, engine.Host)
	local := make([]engine.Slice, 4)
	remote := make([]agent.RemoteDesc, 4)
	for i := range local {
		blocks.Bytes()[i*4096] = byte('A' + i)
		local[i] = blocks.Slice(i*4096, 4096)
		remote[i] = agent.RemoteDesc{Section: "kv", Off: (15 - i) * 4096}
	}
	px, err := client.Prepare(ctx, "target", local, remote)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(px.Write(ctx, []int{3, 1}).Wait(ctx))
	fmt.Printf("%c %c\n", kv.Bytes()[12*4096], kv.Bytes()[14*4096])
	// Output:
	// <nil>
	// D B
}

// Forget: an application done with a peer drops it (its record, its
// connection, the address it was Connected at) instead of keeping it until
// the agent closes.
func ExampleAgent_Forget() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "gxfer-example")
	defer os.RemoveAll(dir)
	cfg := engine.Config{Devices: engine.DevicesNone}
	teng, _ := engine.New(cfg)
	defer teng.Close()
	target, _ := agent.New(ctx, agent.Config{Name: "target", Engine: teng, Unix: filepath.Join(dir, "t.sock")})
	defer target.Close()

	ceng, _ := engine.New(cfg)
	defer ceng.Close()
	client, _ := agent.New(ctx, agent.Config{Name: "client", Engine: ceng})
	defer client.Close()
	name, _ := client.Connect(ctx, target.Metadata().Unix)
	p, _ := client.Peer(ctx, name)
	fmt.Println(client.Notify(ctx, name, []byte("last words")))

	fmt.Println(client.Forget(name))
	fmt.Println(errors.Is(p.Err(), agent.ErrForgotten))
	_, err := client.Peer(ctx, name)
	fmt.Println(errors.Is(err, meta.ErrNotFound), errors.Is(client.Forget(name), meta.ErrNotFound))
	// Output:
	// <nil>
	// <nil>
	// true
	// true true
}
