// Command rdmafloor measures the floor of an RDMA-write ping-pong written
// in Go on this machine: the loop of perftest's ib_write_lat (wait for the
// peer's write in memory, post an 8-byte write, poll its completion) over
// gxfer's verbs binding (internal/verbs: one cgo call per post, one per
// poll), with nothing of gxfer's engine, rdma package or harness in it.
// bench/rdma-compare.sh runs it next to ib_write_lat and gxfer perf, so
// that a latency gap can be split into what any Go program pays (cgo
// crossings, the Go scheduler) and what gxfer adds.
//
// It takes ib_write_lat's flags and prints its result table:
//
//	rdmafloor -d rxe0 -x 0 -s 8 -n 2000              # server
//	rdmafloor -d rxe0 -x 0 -s 8 -n 2000 127.0.0.1    # client
//
// The client prints, in microseconds, half of each round trip: minimum,
// maximum, median (t_typical), mean (t_avg), standard deviation and the
// 99th and 99.9th percentiles, as ib_write_lat does. Rounds are timed with
// the TSC (bench.ClockTSC), as perftest times them.
package main

import (
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/bench"
	"github.com/gxfer/gxfer/internal/verbs"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// params are the command line's.
type params struct {
	dev      string
	gidIndex int
	ibPort   int
	size     int
	iters    int
	port     int
	peer     string // the server's host: this side is the client
	timeout  time.Duration
	yield    time.Duration
}

const (
	maxSize   = 2048 // each side's buffer is a page: send half, receive half
	maxInline = 64
	pageSize  = 4096
	magic     = 0x67786672 // "gxfr"
	infoLen   = 44
)

func parse(args []string, stderr io.Writer) (params, error) {
	var p params
	fs := flag.NewFlagSet("rdmafloor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&p.dev, "d", "", "RDMA device (default: the first)")
	fs.IntVar(&p.gidIndex, "x", 0, "GID index")
	fs.IntVar(&p.ibPort, "i", 1, "device port")
	fs.IntVar(&p.size, "s", 8, "bytes per write (8 to 2048)")
	fs.IntVar(&p.iters, "n", 1000, "round trips")
	fs.IntVar(&p.port, "p", 18517, "TCP port of the connection setup")
	fs.DurationVar(&p.timeout, "timeout", 60*time.Second, "give up when a round takes longer")
	fs.DurationVar(&p.yield, "yield", 2*time.Millisecond, "yield to the Go scheduler this often (0: never), as gxfer perf's ping-pong does")
	fs.Bool("F", false, "ignored (ib_write_lat's)")
	if err := fs.Parse(args); err != nil {
		return p, err
	}
	switch {
	case fs.NArg() > 1:
		return p, fmt.Errorf("one server address at most, got %q", fs.Args())
	case p.size < 8 || p.size > maxSize:
		return p, fmt.Errorf("-s %d: from 8 to %d bytes", p.size, maxSize)
	case p.iters < 2:
		return p, fmt.Errorf("-n %d: at least 2 round trips", p.iters)
	case p.port <= 0 || p.port > 65535:
		return p, fmt.Errorf("-p %d: not a TCP port", p.port)
	case p.ibPort < 1 || p.ibPort > 255 || p.gidIndex < 0 || p.gidIndex > 255:
		return p, fmt.Errorf("-i %d -x %d: out of range", p.ibPort, p.gidIndex)
	case p.timeout <= 0 || p.yield < 0:
		return p, errors.New("-timeout must be positive and -yield not negative")
	}
	p.peer = fs.Arg(0)
	return p, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	p, err := parse(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "rdmafloor:", err)
		}
		return 2
	}
	lat, err := pingPong(p, nil)
	if err != nil {
		fmt.Fprintln(stderr, "rdmafloor:", err)
		return 1
	}
	if lat != nil {
		report(stdout, p, lat)
	}
	return 0
}

// side is one end: its verbs objects and its page of registered memory.
type side struct {
	ctx  *verbs.Context
	pd   *verbs.PD
	cq   *verbs.CQ
	qp   *verbs.QP
	mem  []byte
	mr   *verbs.MR
	mtu  verbs.MTU
	gid  verbs.GID
	psn  uint32
	conn net.Conn
}

func (s *side) close() error {
	var errs []error
	if s.conn != nil {
		errs = append(errs, s.conn.Close())
	}
	if s.qp != nil {
		errs = append(errs, s.qp.Close())
	}
	if s.mr != nil {
		errs = append(errs, s.mr.Close())
	}
	if s.mem != nil {
		errs = append(errs, unix.Munmap(s.mem))
	}
	if s.cq != nil {
		errs = append(errs, s.cq.Close())
	}
	if s.pd != nil {
		errs = append(errs, s.pd.Close())
	}
	if s.ctx != nil {
		errs = append(errs, s.ctx.Close())
	}
	return errors.Join(errs...)
}

// open makes the device objects of one side.
func open(p params) (_ *side, err error) {
	if err := verbs.Load(); err != nil {
		return nil, err
	}
	if p.dev == "" {
		names, err := verbs.DeviceNames()
		if err != nil {
			return nil, err
		}
		if len(names) == 0 {
			return nil, errors.New("no RDMA device")
		}
		p.dev = names[0]
	}
	s := &side{psn: rand.Uint32() & 0xffffff}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.close())
		}
	}()
	if s.ctx, err = verbs.Open(p.dev); err != nil {
		return nil, err
	}
	port, err := s.ctx.QueryPort(uint8(p.ibPort))
	if err != nil {
		return nil, err
	}
	s.mtu = port.ActiveMTU
	if s.gid, err = s.ctx.QueryGID(uint8(p.ibPort), p.gidIndex); err != nil {
		return nil, err
	}
	if s.pd, err = s.ctx.AllocPD(); err != nil {
		return nil, err
	}
	if s.cq, err = s.ctx.CreateCQ(16, nil, 0, 1); err != nil {
		return nil, err
	}
	if s.qp, err = s.pd.CreateQP(verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, Type: verbs.QPTypeRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: maxInline}}); err != nil {
		return nil, err
	}
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	if err = s.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, PortNum: uint8(p.ibPort), AccessFlags: access},
		verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return nil, err
	}
	if s.mem, err = unix.Mmap(-1, 0, pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE); err != nil {
		return nil, err
	}
	base := uintptr(unsafe.Pointer(&s.mem[0]))
	if s.mr, err = s.pd.RegMR(base, pageSize, uint64(base), access); err != nil {
		return nil, err
	}
	return s, nil
}

// info is what one side tells the other.
type info struct {
	qpn, psn, rkey uint32
	addr           uint64
	mtu            verbs.MTU
	gid            verbs.GID
}

// encode lays out an info big-endian: magic, QPN, PSN, rkey (4 bytes
// each), the address (8), the path MTU (4), the GID (16).
func (i info) encode() []byte {
	b := make([]byte, 0, infoLen)
	b = binary.BigEndian.AppendUint32(b, magic)
	b = binary.BigEndian.AppendUint32(b, i.qpn)
	b = binary.BigEndian.AppendUint32(b, i.psn)
	b = binary.BigEndian.AppendUint32(b, i.rkey)
	b = binary.BigEndian.AppendUint64(b, i.addr)
	b = binary.BigEndian.AppendUint32(b, uint32(i.mtu))
	return append(b, i.gid[:]...)
}

// decode parses the peer's info (infoLen bytes).
func decode(b []byte) (info, error) {
	var i info
	if len(b) != infoLen {
		return i, fmt.Errorf("peer info: %d bytes, want %d", len(b), infoLen)
	}
	if m := binary.BigEndian.Uint32(b); m != magic {
		return i, fmt.Errorf("peer info: magic %#x, want %#x (not an rdmafloor peer)", m, magic)
	}
	i.qpn = binary.BigEndian.Uint32(b[4:])
	i.psn = binary.BigEndian.Uint32(b[8:])
	i.rkey = binary.BigEndian.Uint32(b[12:])
	i.addr = binary.BigEndian.Uint64(b[16:])
	i.mtu = verbs.MTU(binary.BigEndian.Uint32(b[24:]))
	copy(i.gid[:], b[28:])
	switch {
	case i.qpn == 0 || i.qpn > 0xffffff || i.psn > 0xffffff:
		return i, fmt.Errorf("peer info: QPN %d, PSN %d out of range", i.qpn, i.psn)
	case i.mtu.Bytes() == 0:
		return i, fmt.Errorf("peer info: unknown path MTU %d", i.mtu)
	case i.addr == 0:
		return i, errors.New("peer info: no buffer address")
	}
	return i, nil
}

// pingPong runs the ping-pong as the server (p.peer empty: on ln, or on
// p.port when ln is nil) or as the client, and returns the client's
// samples: half of each round trip, in microseconds (nil on the server).
func pingPong(p params, ln net.Listener) (lat []float64, err error) {
	clk, err := bench.NewClock(bench.ClockTSC)
	if err != nil {
		if clk, err = bench.NewClock(bench.ClockAuto); err != nil {
			return nil, err
		}
	}
	s, err := open(p)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, s.close()) }()
	if s.conn, err = connect(p, ln); err != nil {
		return nil, err
	}
	base := uint64(uintptr(unsafe.Pointer(&s.mem[0])))
	peer, err := exchange(s.conn, p.timeout, info{qpn: s.qp.QPN(), psn: s.psn, rkey: s.mr.RKey(), addr: base, mtu: s.mtu, gid: s.gid})
	if err != nil {
		return nil, err
	}
	if err := s.connectQP(p, peer); err != nil {
		return nil, err
	}
	if err := barrier(s.conn, p.timeout); err != nil {
		return nil, err
	}
	client := p.peer != ""
	flags := verbs.SendSignaled
	if p.size <= maxInline {
		flags |= verbs.SendInline
	}
	wr := []verbs.SendWR{{ID: 1, Opcode: verbs.WRRDMAWrite, Flags: flags,
		SGE:        []verbs.SGE{{Addr: base, Length: uint32(p.size), LKey: s.mr.LKey()}},
		RemoteAddr: peer.addr + maxSize, RKey: peer.rkey}}
	// Each side writes its round number into the last 8 bytes of what it
	// sends and spins on the last 8 bytes of its receive half.
	sendSeq := (*uint64)(unsafe.Pointer(&s.mem[p.size-8]))
	recvSeq := (*uint64)(unsafe.Pointer(&s.mem[maxSize+p.size-8]))
	wc := make([]verbs.WC, 1)
	ts := make([]int64, 0, p.iters)
	n := uint64(p.iters)
	start := clk.Now()
	lastYield := start
	var scnt, rcnt, ccnt uint64
	for scnt < n || ccnt < n || rcnt < n {
		if rcnt < n && (scnt > 0 || !client) {
			rcnt++
			for spins := 1; atomic.LoadUint64(recvSeq) != rcnt; spins++ {
				if spins&0xfff == 0 && clk.Duration(clk.Now()-start) > p.timeout {
					return nil, fmt.Errorf("round %d: nothing from the peer within %v", rcnt, p.timeout)
				}
			}
		}
		if scnt < n {
			now := clk.Now()
			if client {
				ts = append(ts, now)
			}
			start = now
			if p.yield > 0 && scnt&63 == 0 && clk.Duration(now-lastYield) >= p.yield {
				// A loop that never enters the scheduler is preempted by
				// the runtime's monitor, which then takes the P from the
				// cgo calls: gxfer perf's ping-pong yields the same way.
				lastYield = now
				runtime.Gosched()
			}
			scnt++
			*sendSeq = scnt
			if _, err := s.qp.PostSend(wr); err != nil {
				return nil, fmt.Errorf("round %d: %w", scnt, err)
			}
		}
		if ccnt < n {
			for spins := 1; ; spins++ {
				k, err := s.cq.Poll(wc)
				if err != nil {
					return nil, err
				}
				if k > 0 {
					if wc[0].Status != verbs.WCSuccess {
						return nil, fmt.Errorf("round %d: write completed with %v", ccnt+1, wc[0].Status)
					}
					break
				}
				if spins&0xfff == 0 && clk.Duration(clk.Now()-start) > p.timeout {
					return nil, fmt.Errorf("round %d: no completion within %v", ccnt+1, p.timeout)
				}
			}
			ccnt++
		}
	}
	// Neither side tears its QP down while the other may still wait for
	// an acknowledgement.
	if err := barrier(s.conn, p.timeout); err != nil {
		return nil, err
	}
	if !client {
		return nil, nil
	}
	lat = make([]float64, 0, len(ts)-1)
	for i := 1; i < len(ts); i++ {
		lat = append(lat, float64(clk.Duration(ts[i]-ts[i-1]))/2e3)
	}
	return lat, nil
}

// connect accepts the client (server) or dials the server (client),
// retrying for the timeout while it is not listening yet.
func connect(p params, ln net.Listener) (net.Conn, error) {
	deadline := time.Now().Add(p.timeout)
	if p.peer == "" {
		if ln == nil {
			l, err := net.Listen("tcp", ":"+strconv.Itoa(p.port))
			if err != nil {
				return nil, err
			}
			defer l.Close()
			ln = l
		}
		if tl, ok := ln.(*net.TCPListener); ok {
			_ = tl.SetDeadline(deadline)
		}
		return ln.Accept()
	}
	addr := net.JoinHostPort(p.peer, strconv.Itoa(p.port))
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil || time.Now().After(deadline) {
			return c, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exchange sends this side's info and reads the peer's.
func exchange(c net.Conn, timeout time.Duration, mine info) (info, error) {
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return info{}, err
	}
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write(mine.encode()); err != nil {
		return info{}, err
	}
	b := make([]byte, infoLen)
	if _, err := io.ReadFull(c, b); err != nil {
		return info{}, fmt.Errorf("peer info: %w", err)
	}
	return decode(b)
}

// barrier: each side sends one byte and waits for the other's.
func barrier(c net.Conn, timeout time.Duration) error {
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte{1}); err != nil {
		return err
	}
	_, err := io.ReadFull(c, make([]byte, 1))
	return err
}

// connectQP moves the QP to RTR and RTS towards the peer.
func (s *side) connectQP(p params, peer info) error {
	if err := s.qp.Modify(&verbs.QPAttr{
		State: verbs.QPSRTR, PathMTU: min(s.mtu, peer.mtu), DestQPN: peer.qpn, RQPSN: peer.psn,
		MaxDestRDAtomic: 1, MinRNRTimer: 12,
		AH: verbs.AHAttr{IsGlobal: true, DGID: peer.gid, SGIDIndex: uint8(p.gidIndex), HopLimit: 64, PortNum: uint8(p.ibPort)},
	}, verbs.QPAttrState|verbs.QPAttrAV|verbs.QPAttrPathMTU|verbs.QPAttrDestQPN|verbs.QPAttrRQPSN|
		verbs.QPAttrMaxDestRDAtomic|verbs.QPAttrMinRNRTimer); err != nil {
		return fmt.Errorf("QP to RTR: %w", err)
	}
	if err := s.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: s.psn, MaxRDAtomic: 1},
		verbs.QPAttrState|verbs.QPAttrTimeout|verbs.QPAttrRetryCnt|verbs.QPAttrRNRRetry|verbs.QPAttrSQPSN|
			verbs.QPAttrMaxQPRDAtomic); err != nil {
		return fmt.Errorf("QP to RTS: %w", err)
	}
	return nil
}

// report prints ib_write_lat's result table.
func report(w io.Writer, p params, lat []float64) {
	v := slices.Clone(lat)
	slices.Sort(v)
	var sum, sq float64
	for _, x := range v {
		sum += x
	}
	avg := sum / float64(len(v))
	for _, x := range v {
		sq += (x - avg) * (x - avg)
	}
	q := func(f float64) float64 { return v[min(len(v)-1, int(f*float64(len(v))))] }
	fmt.Fprintf(w, " %-7s %-11s %-14s %-14s %-16s %-14s %-14s %-22s %-22s\n", "#bytes", "#iterations",
		"t_min[usec]", "t_max[usec]", "t_typical[usec]", "t_avg[usec]", "t_stdev[usec]", "99% percentile[usec]", "99.9% percentile[usec]")
	fmt.Fprintf(w, " %-7d %-11d %-14.2f %-14.2f %-16.2f %-14.2f %-14.2f %-22.2f %-22.2f\n", p.size, p.iters,
		v[0], v[len(v)-1], q(0.5), avg, math.Sqrt(sq/float64(len(v))), q(0.99), q(0.999))
}
