package engine_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gxfer/gxfer/engine"
)

// A list of scattered blocks put as one operation, with a status per
// block: over a unix socket the host blocks are one copy.
func ExampleEndpoint_PutList() {
	cfg := engine.Config{Devices: engine.DevicesNone}
	owner, _ := engine.New(cfg)
	defer owner.Close()
	user, _ := engine.New(cfg)
	defer user.Close()
	dir, _ := os.MkdirTemp("", "gxfer-example")
	defer os.RemoveAll(dir)
	ln, err := owner.Listen("unix", filepath.Join(dir, "owner.sock"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	cache, _ := owner.Alloc(64<<10, engine.Host)
	key, _ := cache.Export()

	ctx := context.Background()
	ep, err := user.Dial(ctx, "unix", ln.Addr())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ep.Close()
	blocks, _ := user.Alloc(4*4096, engine.Host)
	copy(blocks.Bytes()[3*4096:], "block 3")
	var locals []engine.Slice
	var remotes []engine.RemoteKey
	for i := range 4 { // block i goes to slot 15-i of the peer's cache
		locals = append(locals, blocks.Slice(i*4096, 4096))
		remotes = append(remotes, key.Slice((15-i)*4096, 4096))
	}
	f := ep.PutList(ctx, locals, remotes)
	fmt.Println(f.Wait(ctx), len(f.Errs()))
	fmt.Println(string(cache.Bytes()[12*4096 : 12*4096+7]))
	// Output:
	// <nil> 4
	// block 3
}
