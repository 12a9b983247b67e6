// Command tcp moves data between two engines over TCP, the transport for
// nodes without RDMA: one engine listens and exports a host buffer and a
// Gaudi buffer; the other dials it, puts data into both and gets it back.
// The bytes travel in Data frames on the connection and land straight in
// the destination (Gaudi memory through the owner's pipelined staging).
//
// By default both engines run in this process on 127.0.0.1. To run them on
// two machines:
//
//	tcp -serve :7000                      (prints its device, then a line: its address and the keys)
//	tcp -connect host:7000 -keys LINE     (that line, all it printed, or the keys alone)
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/gxfer/gxfer/engine"
)

func main() {
	serve := flag.String("serve", "", "listen at this address and serve until interrupted")
	connect := flag.String("connect", "", "dial the server at this address")
	keys := flag.String("keys", "", "the line the server printed, or its keys alone (with -connect)")
	flag.Parse()
	var err error
	switch {
	case *serve != "":
		err = serverReady(*serve, os.Stdout, interrupted(), nil)
	case *connect != "":
		err = client(*connect, *keys, os.Stdout, nil)
	default:
		err = run(os.Stdout, nil)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "tcp:", err)
		os.Exit(1)
	}
}

func interrupted() <-chan os.Signal {
	c := make(chan os.Signal, 1)
	signal.Notify(c, os.Interrupt)
	return c
}

func config() engine.Config {
	return engine.Config{Emulator: engine.EmulatorConfig{DRAMSize: 256 << 20}}
}

// run starts a server on 127.0.0.1 and a client against it, in this
// process.
func run(out io.Writer, tamper func(*engine.Engine, *engine.Buffer) error) error {
	ready := make(chan string, 1)
	stop := make(chan struct{})
	errc := make(chan error, 1)
	go func() { errc <- serverReady("127.0.0.1:0", out, stop, ready) }()
	var line string
	select {
	case line = <-ready:
	case err := <-errc:
		return err
	}
	addr, keys, _ := strings.Cut(line, " ")
	err := client(addr, keys, out, tamper)
	close(stop)
	return errors.Join(err, <-errc)
}

// describe names a device and says whether it is real or emulated.
func describe(d engine.DeviceInfo) string {
	if d.Emulated {
		return fmt.Sprintf("gaudi%d: %s, emulated (dma/hlsim), not a real Gaudi", d.Index, d.Model)
	}
	return fmt.Sprintf("gaudi%d: %s, real (%s)", d.Index, d.Model, d.Name)
}

// serverReady listens at addr, exports two 1 MiB buffers, prints its
// device and then "ADDR KEYS", or sends that line on ready if it is not
// nil; it serves until stop.
func serverReady[T any](addr string, out io.Writer, stop <-chan T, ready chan<- string) error {
	eng, err := engine.New(config())
	if err != nil {
		return err
	}
	defer eng.Close()
	if eng.NumDevices() == 0 {
		return fmt.Errorf("no Gaudi device (real or emulated)")
	}
	fmt.Fprintf(out, "server's %s\n", describe(eng.Devices()[0]))
	ln, err := eng.Listen("tcp", addr)
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
	line := ln.Addr() + " " + hex.EncodeToString(hk.Bytes()) + "," + hex.EncodeToString(dk.Bytes())
	if ready != nil {
		ready <- line
	} else {
		fmt.Fprintln(out, line)
	}
	<-stop
	return nil
}

// client dials addr and puts and gets 1 MiB to and from each key. keys is
// the comma-separated keys, or the "ADDR KEYS" line the server printed, or
// all it printed (what the usage above says to pass): the keys are its
// last word. tamper, if set (tests),
// runs after each Get with the Gaudi buffer the bytes came back into.
func client(addr, keys string, out io.Writer, tamper func(*engine.Engine, *engine.Buffer) error) error {
	if f := strings.Fields(keys); len(f) > 1 {
		keys = f[len(f)-1]
	}
	var rks []engine.RemoteKey
	for _, k := range strings.Split(keys, ",") {
		b, err := hex.DecodeString(k)
		if err != nil {
			return fmt.Errorf("keys: %w", err)
		}
		rk, err := engine.ParseRemoteKey(b)
		if err != nil {
			return err
		}
		rks = append(rks, rk)
	}
	eng, err := engine.New(config())
	if err != nil {
		return err
	}
	defer eng.Close()
	if eng.NumDevices() == 0 {
		return fmt.Errorf("no Gaudi device (real or emulated)")
	}
	fmt.Fprintf(out, "client's %s\n", describe(eng.Devices()[0]))
	ctx := context.Background()
	ep, err := eng.Dial(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer ep.Close()
	fmt.Fprintf(out, "connected to %s over %v\n", ep.Peer(), ep.Transport())
	src, err := eng.Alloc(1<<20, engine.Host)
	if err != nil {
		return err
	}
	back, err := eng.Alloc(1<<20, engine.Host)
	if err != nil {
		return err
	}
	// Every 8-byte word is distinct (its offset times an odd constant), so
	// bytes landing at another offset fail the check (byte(i*7) would
	// repeat every 256 bytes).
	for i := 0; i < len(src.Bytes()); i += 8 {
		binary.LittleEndian.PutUint64(src.Bytes()[i:], uint64(i)*0x9e3779b97f4a7c15)
	}
	for _, rk := range rks {
		// Put from host memory, get back into Gaudi memory, then copy to
		// the host to check.
		if err := ep.PutSync(ctx, src.All(), rk); err != nil {
			return err
		}
		dev, err := eng.Alloc(1<<20, engine.Gaudi(0))
		if err != nil {
			return err
		}
		if err := ep.GetSync(ctx, dev.All(), rk); err != nil {
			return err
		}
		if tamper != nil {
			if err := tamper(eng, dev); err != nil {
				return err
			}
		}
		if err := eng.CopySync(ctx, back.All(), dev.All()); err != nil {
			return err
		}
		if !bytes.Equal(src.Bytes(), back.Bytes()) {
			return fmt.Errorf("peer's %v memory: data differs", rk.Location())
		}
		fmt.Fprintf(out, "peer's %v memory: 1 MiB put and got back into gaudi0: verified\n", rk.Location())
		_ = dev.Free()
	}
	st := ep.Stats()
	fmt.Fprintf(out, "endpoint: %d puts, %d gets, %d bytes out, %d bytes in\n", st.Puts, st.Gets, st.BytesOut, st.BytesIn)
	return nil
}
