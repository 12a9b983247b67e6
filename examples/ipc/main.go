// Command ipc moves data between two processes on one node: the parent
// starts a copy of itself as the peer, which exports a host buffer and a
// Gaudi buffer; the parent puts data into both and gets it back. Host
// memory travels as a shared memfd mapped once (IPC handle cache); the
// peer's Gaudi memory is written by the peer's own DMA engine.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/gxfer/gxfer/engine"
)

const peerEnv = "GXFER_EXAMPLE_IPC_PEER"

func main() {
	var err error
	if sock := os.Getenv(peerEnv); sock != "" {
		err = peer(sock, os.Stdin, os.Stdout)
	} else {
		err = run(os.Stdout, os.Args[0], nil, nil)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ipc:", err)
		os.Exit(1)
	}
}

func config() engine.Config {
	return engine.Config{Emulator: engine.EmulatorConfig{DRAMSize: 256 << 20}}
}

// describe names a device and says whether it is real or emulated.
func describe(d engine.DeviceInfo) string {
	if d.Emulated {
		return fmt.Sprintf("gaudi%d: %s, emulated (dma/hlsim), not a real Gaudi", d.Index, d.Model)
	}
	return fmt.Sprintf("gaudi%d: %s, real (%s)", d.Index, d.Model, d.Name)
}

// peer listens at sock, exports two buffers and prints their keys and its
// Gaudi device; it serves until its stdin closes.
func peer(sock string, in io.Reader, out io.Writer) error {
	eng, err := engine.New(config())
	if err != nil {
		return err
	}
	defer eng.Close()
	ln, err := eng.Listen("unix", sock)
	if err != nil {
		return err
	}
	defer ln.Close()
	host, err := eng.Alloc(1<<20, engine.Host)
	if err != nil {
		return err
	}
	hbm, err := eng.Alloc(1<<20, engine.Gaudi(0))
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
	fmt.Fprintln(out, "KEYS", hex.EncodeToString(hk.Bytes()), hex.EncodeToString(dk.Bytes()), describe(eng.Devices()[0]))
	_, _ = io.Copy(io.Discard, in) // serve until the parent closes our stdin
	return nil
}

// run starts the peer (exe with env set, plus args) and talks to it.
// tamper, if set (tests), runs after each Get with the buffer the bytes
// came back into.
func run(w io.Writer, exe string, args []string, tamper func(*engine.Buffer)) error {
	dir, err := os.MkdirTemp("", "gxfer-ipc")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "peer.sock")
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), peerEnv+"="+sock)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() {
		return fmt.Errorf("peer exited before exporting")
	}
	f := strings.Fields(sc.Text())
	if len(f) < 4 || f[0] != "KEYS" {
		return fmt.Errorf("peer said %q", sc.Text())
	}
	var keys [2]engine.RemoteKey
	for i := range keys {
		b, err := hex.DecodeString(f[i+1])
		if err != nil {
			return err
		}
		if keys[i], err = engine.ParseRemoteKey(b); err != nil {
			return err
		}
	}

	eng, err := engine.New(config())
	if err != nil {
		return err
	}
	defer eng.Close()
	ctx := context.Background()
	ep, err := eng.Dial(ctx, "unix", sock)
	if err != nil {
		return err
	}
	defer ep.Close()
	fmt.Fprintf(w, "connected to %s\n", ep.Peer())
	fmt.Fprintf(w, "the peer's %s\n", strings.Join(f[3:], " "))
	src, err := eng.Alloc(64<<10, engine.Host)
	if err != nil {
		return err
	}
	back, err := eng.Alloc(64<<10, engine.Host)
	if err != nil {
		return err
	}
	// Every 8-byte word is distinct (its offset times an odd constant), so
	// bytes landing at another offset fail the check (byte(i*13) would
	// repeat every 256 bytes).
	for i := 0; i < len(src.Bytes()); i += 8 {
		binary.LittleEndian.PutUint64(src.Bytes()[i:], uint64(i)*0x9e3779b97f4a7c15)
	}
	for _, k := range keys {
		remote := k.Slice(4096, 64<<10)
		if err := ep.PutSync(ctx, src.All(), remote); err != nil {
			return fmt.Errorf("put to peer %s memory: %w", k.Location(), err)
		}
		clear(back.Bytes())
		if err := ep.GetSync(ctx, back.All(), remote); err != nil {
			return fmt.Errorf("get from peer %s memory: %w", k.Location(), err)
		}
		if tamper != nil {
			tamper(back)
		}
		if !bytes.Equal(src.Bytes(), back.Bytes()) {
			return fmt.Errorf("peer %s memory: data differs", k.Location())
		}
		fmt.Fprintf(w, "put and got 64 KiB of the peer's %s memory: verified\n", k.Location())
	}
	// Many small messages to the same place: bind once, then each Put is a
	// copy into the peer's mapped memory.
	msg, err := eng.Alloc(8, engine.Host)
	if err != nil {
		return err
	}
	b, err := ep.Bind(ctx, msg.All(), keys[0].Slice(0, 8))
	if err != nil {
		return err
	}
	defer b.Close()
	for i := 0; i < 1000; i++ {
		msg.Bytes()[0] = byte(i)
		if err := b.Put(); err != nil {
			return err
		}
	}
	if err := ep.GetSync(ctx, back.Slice(0, 8), keys[0].Slice(0, 8)); err != nil {
		return err
	}
	if back.Bytes()[0] != byte(999%256) {
		return fmt.Errorf("bound puts: last message not in the peer's memory")
	}
	fmt.Fprintln(w, "1000 bound 8-byte puts: verified")
	return nil
}
