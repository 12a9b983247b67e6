// Command rdma moves data between two engines over RDMA (InfiniBand or
// RoCE; Soft-RoCE works): one engine listens and exports a host buffer and
// a Gaudi buffer; the other dials it, and because both engines have an
// RDMA device the endpoint's data goes by RDMA (the TCP connection only
// carries requests and heartbeats).
//
//   - Put and Get between host memory: one RDMA write or read, straight
//     between the buffers; the peer's CPU takes no part.
//
//   - Into the peer's Gaudi memory: zero copy where its NIC registers
//     DMA-BUFs, else the owner moves the data through pinned host buffers
//     (Soft-RoCE); the endpoint's stats say which path each op took.
//
//   - A Binding for many small messages to one place: the registration,
//     the peer's address and the work request are prepared once, and each
//     Put is one post whose completion the caller takes itself; PutN posts
//     chains of writes, keeping the send queue full, and Flush waits.
//
//   - From this side's Gaudi memory: zero copy where the NIC registers
//     DMA-BUFs, else staged through pinned host chunks by the Gaudi DMA
//     engine, the DMA of one chunk overlapping the RDMA of the other.
//
//   - Several NICs per side (-nics): the endpoint has a queue pair on each,
//     transfers between host memory of 1 MiB or more are sliced over them,
//     and the chunks of a staged transfer take turns on them.
//
// Both engines run in this process on 127.0.0.1; the RDMA device is the
// first with an active port (-device to choose). Without one it says why
// and exits with status 2.
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
	"strings"
	"time"

	"github.com/gxfer/gxfer/engine"
)

// errNoRDMA: the engines have no usable RDMA device.
var errNoRDMA = errors.New("RDMA unavailable")

func main() {
	device := flag.String("device", "", "RDMA device (default: the first with an active port)")
	gid := flag.Int("gid", 0, "GID index")
	nics := flag.String("nics", "", `NICs of each engine, "A0,A1/B0,B1": the dialing engine's, then the listening one's (NIC i of one reaching NIC i of the other); instead of -device`)
	flag.Parse()
	user, owner := engine.RDMAConfig{Device: *device, GIDIndex: *gid}, engine.RDMAConfig{Device: *device, GIDIndex: *gid}
	if *nics != "" {
		a, b, ok := strings.Cut(*nics, "/")
		if !ok || *device != "" {
			fmt.Fprintln(os.Stderr, `rdma: -nics takes "A0,A1/B0,B1", without -device`)
			os.Exit(2)
		}
		user.Device, user.Devices = "", strings.Split(a, ",")
		owner.Device, owner.Devices = "", strings.Split(b, ",")
	}
	if err := run(os.Stdout, user, owner, nil); err != nil {
		fmt.Fprintln(os.Stderr, "rdma:", err)
		if errors.Is(err, errNoRDMA) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// run runs the example: an engine on userRC dials one on ownerRC. tamper,
// if set (tests), changes the owner's host buffer after the first Put
// into it, before the Get that checks it.
func run(out io.Writer, userRC, ownerRC engine.RDMAConfig, tamper func(host *engine.Buffer)) error {
	cfg := engine.Config{Emulator: engine.EmulatorConfig{DRAMSize: 256 << 20}, RDMA: ownerRC}
	owner, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer owner.Close()
	if info := owner.RDMA(); !info.Available {
		return fmt.Errorf("%w: %s", errNoRDMA, strings.TrimPrefix(info.Reason, "RDMA unavailable: "))
	}
	cfg.RDMA = userRC
	user, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer user.Close()
	ln, err := owner.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()

	const n = 4 << 20
	host, err := owner.Alloc(n, engine.Host)
	if err != nil {
		return err
	}
	hbm, err := owner.Alloc(n, engine.Gaudi(0))
	if err != nil {
		return err
	}
	hk, err := host.Export()
	if err != nil {
		return err
	}
	dk, err := hbm.Export()
	if err != nil {
		return err
	}

	ctx := context.Background()
	ep, err := user.Dial(ctx, "tcp", ln.Addr())
	if err != nil {
		return err
	}
	defer ep.Close()
	info := user.RDMA()
	fmt.Fprintf(out, "connected over %v on %s port %d\n", ep.Transport(), info.Device, info.Port)

	src, err := user.Alloc(n, engine.Host)
	if err != nil {
		return err
	}
	back, err := user.Alloc(n, engine.Host)
	if err != nil {
		return err
	}
	// Every 8-byte word is distinct (its offset times an odd constant), so
	// bytes that land at the wrong offset fail the check.
	fillWords(src.Bytes(), 0x9e3779b97f4a7c15)
	for _, rk := range []engine.RemoteKey{hk, dk} {
		clear(back.Bytes())
		if err := ep.PutSync(ctx, src.All(), rk); err != nil {
			return err
		}
		if tamper != nil && rk.Location() == engine.Host {
			tamper(host)
		}
		if err := ep.GetSync(ctx, back.All(), rk); err != nil {
			return err
		}
		if !bytes.Equal(src.Bytes(), back.Bytes()) {
			return fmt.Errorf("peer's %v memory: data differs", rk.Location())
		}
		fmt.Fprintf(out, "peer's %v memory: 4 MiB put and got back: verified\n", rk.Location())
	}
	// From this side's Gaudi memory into the peer's host memory (a new
	// pattern), then back into it (zeroed first).
	dev, err := user.Alloc(n, engine.Gaudi(0))
	if err != nil {
		return err
	}
	fillWords(src.Bytes(), 0xc2b2ae3d27d4eb4f)
	if err := user.CopySync(ctx, dev.All(), src.All()); err != nil {
		return err
	}
	if err := ep.PutSync(ctx, dev.All(), hk); err != nil {
		return err
	}
	clear(back.Bytes())
	if err := user.CopySync(ctx, dev.All(), back.All()); err != nil {
		return err
	}
	if err := ep.GetSync(ctx, dev.All(), hk); err != nil {
		return err
	}
	if err := user.CopySync(ctx, back.All(), dev.All()); err != nil {
		return err
	}
	if !bytes.Equal(src.Bytes(), back.Bytes()) {
		return errors.New("this side's Gaudi memory: data differs")
	}
	fmt.Fprintf(out, "this side's %v memory: 4 MiB put into the peer's host memory and got back: verified\n", dev.Location())

	st := ep.Stats()
	fmt.Fprintf(out, "paths: %d zero copy, %d staged through host memory, %d delegated to the owner; %d bytes on the TCP connection\n",
		st.ZeroCopy, st.Staged, st.Delegated, st.BytesOut+st.BytesIn)
	if len(st.NICWRs) > 1 {
		fmt.Fprintf(out, "NICs %s: work requests posted on each: %v (the host transfers were sliced, the staged chunks took turns)\n",
			strings.Join(info.NICs, ", "), st.NICWRs)
	}

	// A binding: 8-byte messages into the first 8 bytes of the peer's
	// host buffer.
	msg, err := user.Alloc(8, engine.Host)
	if err != nil {
		return err
	}
	b, err := ep.Bind(ctx, msg.All(), hk.Slice(0, 8))
	if err != nil {
		return err
	}
	defer b.Close()
	const rounds = 1000
	t0 := time.Now()
	for i := 1; i <= rounds; i++ {
		msg.Bytes()[0] = byte(i)
		if err := b.Put(); err != nil { // done on return: the data is in the peer's memory
			return err
		}
	}
	el := time.Since(t0)
	if got, want := host.Bytes()[0], byte(rounds%256); got != want {
		return fmt.Errorf("binding: the peer holds %d, want %d", got, want)
	}
	fmt.Fprintf(out, "binding: %d puts of 8 B, each waited for: %.1f us per put\n", rounds, el.Seconds()*1e6/rounds)
	t0 = time.Now()
	if err := b.PutN(rounds); err != nil { // posted, up to 128 in flight
		return err
	}
	if err := b.Flush(); err != nil {
		return err
	}
	el = time.Since(t0)
	fmt.Fprintf(out, "binding: %d puts of 8 B streamed with PutN: %.1f us per put\n", rounds, el.Seconds()*1e6/rounds)
	return b.Close()
}

// fillWords sets each 8-byte word of b to its offset times k (odd): every
// word is distinct.
func fillWords(b []byte, k uint64) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], uint64(i)*k)
	}
}
