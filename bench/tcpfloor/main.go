// Command tcpfloor measures the floor of gxfer's put_bw over TCP for a
// program written in Go on this machine: the same exchange as gxfer perf
// put_bw between host buffers (a sender keeping W puts of SIZE bytes
// outstanding, all from one source buffer into one destination buffer;
// each put's bytes written with writev in frames of at most 1 MiB behind
// a 16-byte header; the receiver reading each frame's payload straight
// into the destination and answering a put's last frame with a 16-byte
// completion) over one plain net.TCPConn, with nothing of gxfer's engine,
// wire protocol or harness in it. bench/tcp-compare.sh runs it beside
// iperf3 and gxfer perf, so that a bandwidth gap can be split into what
// any Go program pays here (the runtime, the system calls, the kernel's
// copies) and what gxfer adds, as bench/rdmafloor does for RDMA.
//
//	tcpfloor -server -addr 10.0.0.1:5000                   # receiver: one run, then exits
//	tcpfloor -addr 10.0.0.1:5000 -s 1048576 -O 4 -time 3s  # sender: prints one JSON result
//
// The sender reports MB/s (MB = 2^20 bytes, as gxfer perf) over the
// measured puts, each counted when its completion arrived, and its CPU
// time per put (getrusage, as gxfer perf's cpu field). At the end the
// receiver compares its destination with the pattern the sender's source
// holds and answers whether every byte matched ("verified").
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

const (
	// maxFrame is the largest payload of one frame: gxfer's TCP data
	// path sends a put's host bytes in frames of this size (its Chunk).
	maxFrame = 1 << 20
	maxSize  = 256 << 20
	headSize = 16
	magic    = "GXFLOOR1"
	// endID is the id of the receiver's answer to the end of a run.
	endID = ^uint32(0)
)

// params are the command line's.
type params struct {
	server  bool
	addr    string
	size    int
	window  int
	dur     time.Duration
	warm    int
	timeout time.Duration
}

func parse(args []string, stderr io.Writer) (params, error) {
	var p params
	fs := flag.NewFlagSet("tcpfloor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&p.server, "server", false, "receive one run on -addr, then exit")
	fs.StringVar(&p.addr, "addr", "", "host:port to listen on (-server) or to connect to")
	fs.IntVar(&p.size, "s", 1<<20, "bytes per put")
	fs.IntVar(&p.window, "O", 4, "puts outstanding")
	fs.DurationVar(&p.dur, "time", 3*time.Second, "measured time")
	fs.IntVar(&p.warm, "w", 20, "warm-up puts before the measured time")
	fs.DurationVar(&p.timeout, "timeout", 30*time.Second, "limit on the connection's set-up and on any one wait for the peer")
	if err := fs.Parse(args); err != nil {
		return p, err
	}
	switch {
	case fs.NArg() != 0:
		return p, fmt.Errorf("unexpected arguments %q", fs.Args())
	case p.addr == "":
		return p, errors.New("-addr is required")
	case p.size < 1 || p.size > maxSize:
		return p, fmt.Errorf("-s %d: from 1 to %d bytes", p.size, maxSize)
	case p.window < 1 || p.window > 64:
		return p, fmt.Errorf("-O %d: from 1 to 64", p.window)
	case p.dur <= 0 || p.timeout <= 0:
		return p, errors.New("-time and -timeout must be positive")
	case p.warm < 0:
		return p, errors.New("-w must not be negative")
	}
	return p, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	p, err := parse(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "tcpfloor:", err)
		}
		return 2
	}
	if p.server {
		err = listenOnce(p.addr, p.timeout)
	} else {
		var r *result
		if r, err = sendRun(p); err == nil {
			err = json.NewEncoder(stdout).Encode(r)
		}
	}
	if err != nil {
		fmt.Fprintln(stderr, "tcpfloor:", err)
		return 1
	}
	return 0
}

// fill writes the pattern that the source holds and the destination is
// checked against.
func fill(b []byte) {
	for i := range b {
		b[i] = byte(i % 251)
	}
}

// hello is the sender's first 16 bytes: the magic and the put size.
func hello(size int) []byte {
	b := make([]byte, headSize)
	copy(b, magic)
	binary.LittleEndian.PutUint32(b[8:], uint32(size))
	return b
}

// parseHello returns the put size a hello announces.
func parseHello(b []byte) (int, error) {
	if len(b) != headSize || string(b[:8]) != magic {
		return 0, errors.New("not a tcpfloor sender (bad hello)")
	}
	size := int(binary.LittleEndian.Uint32(b[8:]))
	if size < 1 || size > maxSize || binary.LittleEndian.Uint32(b[12:]) != 0 {
		return 0, fmt.Errorf("hello: put size %d (1..%d) or reserved bytes not zero", size, maxSize)
	}
	return size, nil
}

// putHead encodes a frame's header: n payload bytes at offset off of put
// id; n 0 ends the run.
func putHead(h []byte, n int, id uint32, off int) {
	binary.LittleEndian.PutUint32(h[0:], uint32(n))
	binary.LittleEndian.PutUint32(h[4:], id)
	binary.LittleEndian.PutUint64(h[8:], uint64(off))
}

// reply encodes a completion (or the end's answer).
func reply(h []byte, id, status uint32) {
	clear(h)
	binary.LittleEndian.PutUint32(h[0:], id)
	binary.LittleEndian.PutUint32(h[4:], status)
}
