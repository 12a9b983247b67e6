// Command agents shows named agents (package agent): two agents in one
// process, "decode" and "prefill". decode offers a Gaudi memory section
// named "kv" and listens on a unix socket; prefill finds it by address
// (the side channel: no metadata service), writes a scattered list of KV
// blocks into the section by name with one request, and attaches a
// notification that decode receives only once the blocks are in its
// memory. decode then checks them.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/gxfer/gxfer/agent"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

func main() {
	flag.Parse()
	if err := run(os.Stdout, nil); err != nil {
		fmt.Fprintln(os.Stderr, "agents:", err)
		os.Exit(1)
	}
}

const (
	blocks    = 64 // KV blocks written
	blockSize = 64 << 10
	slots     = 256 // blocks the section holds
)

func config() engine.Config {
	return engine.Config{Devices: engine.DevicesEmulated, Emulator: engine.EmulatorConfig{DRAMSize: 256 << 20}}
}

// run runs both agents. tamper, if set (tests), runs when decode has the
// notification, before it checks, with decode's engine and section.
func run(out io.Writer, tamper func(*engine.Engine, *engine.Buffer) error) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "gxfer-agents")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	// The decode worker: an agent that offers its KV cache as "kv".
	deng, err := engine.New(config())
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, deng.Close()) }()
	if d := deng.Devices()[0]; d.Emulated {
		fmt.Fprintf(out, "decode's gaudi%d: %s, emulated (dma/hlsim), not a real Gaudi\n", d.Index, d.Model)
	}
	decode, err := agent.New(ctx, agent.Config{Name: "decode", Engine: deng, Unix: filepath.Join(dir, "decode.sock")})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, decode.Close()) }()
	kv, err := deng.Alloc(slots*blockSize, engine.Gaudi(0))
	if err != nil {
		return err
	}
	if err := decode.Publish("kv", kv.All()); err != nil {
		return err
	}

	// The prefill worker: its own engine and agent.
	peng, err := engine.New(config())
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, peng.Close()) }()
	prefill, err := agent.New(ctx, agent.Config{Name: "prefill", Engine: peng})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, prefill.Close()) }()
	name, err := prefill.Connect(ctx, decode.Metadata().Unix)
	if err != nil {
		return err
	}
	p, err := prefill.Peer(ctx, name)
	if err != nil {
		return err
	}
	sec, err := p.Section("kv")
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "prefill found %q (incarnation %016x): section kv, %d bytes of %s memory\n",
		name, p.Incarnation(), sec.Len, sec.Location)

	// Prefill's computed blocks, in host memory; they go to scattered
	// slots of decode's cache (slot 3*i+1), in one request.
	src, err := peng.Alloc(blocks*blockSize, engine.Host)
	if err != nil {
		return err
	}
	// Every 8-byte word is distinct (its offset times an odd constant), so
	// bytes landing at another offset fail the check (byte(i*31 + i/blockSize) would repeat
	// every 256 bytes).
	for i := 0; i < len(src.Bytes()); i += 8 {
		binary.LittleEndian.PutUint64(src.Bytes()[i:], uint64(i)*0x9e3779b97f4a7c15)
	}
	descs := make([]agent.Desc, blocks)
	for i := range descs {
		descs[i] = agent.Desc{Local: src.Slice(i*blockSize, blockSize), Section: "kv", Off: (3*i + 1) * blockSize}
	}
	x := prefill.Write(ctx, "decode", descs, agent.WithNotify([]byte("request 42: 64 blocks")))

	// Decode learns from the notification that the blocks are there.
	n, err := decode.Recv(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "decode got %q from %s\n", n.Msg, n.From)
	if tamper != nil {
		if err := tamper(deng, kv); err != nil {
			return err
		}
	}
	// Checked on the notification alone, before prefill's completion: in
	// two processes that is all decode has.
	back, err := deng.Alloc(blockSize, engine.Host)
	if err != nil {
		return err
	}
	for i := range blocks {
		if err := deng.CopySync(ctx, back.All(), kv.Slice((3*i+1)*blockSize, blockSize)); err != nil {
			return err
		}
		if !bytes.Equal(back.Bytes(), src.Bytes()[i*blockSize:(i+1)*blockSize]) {
			return fmt.Errorf("block %d differs", i)
		}
	}
	if err := x.Wait(ctx); err != nil {
		return err
	}
	tr, _ := p.Transport()
	st := prefill.Stats()
	fmt.Fprintf(out, "decode checked %d blocks of %d KiB: verified (over %v, %d descriptors in %d puts)\n",
		blocks, blockSize>>10, tr, st.Descs, st.Puts)

	// Done with decode: prefill drops its record, keys, connection and
	// address. Without a store, decode is then found only by Connect.
	if err := prefill.Forget("decode"); err != nil {
		return err
	}
	select {
	case <-p.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	if _, err := prefill.Peer(ctx, "decode"); !errors.Is(err, meta.ErrNotFound) {
		return fmt.Errorf("decode still found after Forget: %v", err)
	}
	fmt.Fprintf(out, "prefill forgot decode: %v\n", p.Err())
	return nil
}
