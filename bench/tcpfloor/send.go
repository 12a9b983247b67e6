package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"time"

	"github.com/gxfer/gxfer/bench"
)

// result is what the sender prints, as JSON.
type result struct {
	Tool       string        `json:"tool"`
	Size       int           `json:"size"`
	Window     int           `json:"window"`
	Frame      int           `json:"frame"`
	Puts       int64         `json:"puts"`
	Seconds    float64       `json:"seconds"`
	MBs        float64       `json:"bandwidth_mb_s"`
	PutsPerSec float64       `json:"puts_per_s"`
	CPU        *bench.CPUUse `json:"cpu"`
	Verified   bool          `json:"verified"`
	GoVersion  string        `json:"go_version"`
	GOMAXPROCS int           `json:"gomaxprocs"`
}

// sender writes puts on one connection and takes their completions.
type sender struct {
	c      net.Conn
	src    []byte
	window int
	head   [headSize]byte
	parts  [2][]byte
	v      net.Buffers
	next   uint32 // the next put's id

	done      chan struct{} // a completion each
	readErr   error         // why done closed (set before)
	verified  bool          // the end's answer (set before done closes)
	inflight  int
	completed int64 // completions taken
}

// put writes one put: its frames, each header and payload in one writev.
func (s *sender) put() error {
	id := s.next
	s.next++
	if s.next == endID {
		s.next = 0
	}
	for off := 0; off < len(s.src); off += maxFrame {
		n := min(maxFrame, len(s.src)-off)
		putHead(s.head[:], n, id, off)
		s.parts = [2][]byte{s.head[:], s.src[off : off+n]}
		s.v = s.parts[:]
		if _, err := s.v.WriteTo(s.c); err != nil {
			return err
		}
	}
	s.inflight++
	return nil
}

// complete waits for one completion (the connection's deadline bounds
// the wait: the reader fails then).
func (s *sender) complete() error {
	if _, ok := <-s.done; !ok {
		return s.readErr
	}
	s.inflight--
	s.completed++
	return nil
}

// submit starts a put once the window has room.
func (s *sender) submit() error {
	if s.inflight == s.window {
		if err := s.complete(); err != nil {
			return err
		}
	}
	return s.put()
}

func (s *sender) drain() error {
	for s.inflight > 0 {
		if err := s.complete(); err != nil {
			return err
		}
	}
	return nil
}

// read takes the receiver's completions until the end's answer.
func (s *sender) read() {
	defer close(s.done)
	br := bufio.NewReaderSize(s.c, 4096)
	var h [headSize]byte
	for {
		if _, err := io.ReadFull(br, h[:]); err != nil {
			s.readErr = fmt.Errorf("completion: %w", err)
			return
		}
		id, status := binary.LittleEndian.Uint32(h[0:]), binary.LittleEndian.Uint32(h[4:])
		if id == endID {
			s.verified = status == 1
			s.readErr = errEnded
			return
		}
		s.done <- struct{}{}
	}
}

var errEnded = errors.New("the run ended")

// sendRun connects to the receiver and measures one run.
func sendRun(p params) (*result, error) {
	d := net.Dialer{Timeout: p.timeout}
	c, err := d.Dial("tcp", p.addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if _, err := c.Write(hello(p.size)); err != nil {
		return nil, err
	}
	s := &sender{c: c, src: make([]byte, p.size), window: p.window, done: make(chan struct{}, p.window)}
	fill(s.src)
	reading := make(chan struct{})
	go func() {
		defer close(reading)
		s.read()
	}()
	defer func() {
		c.Close() // ends read on every path
		<-reading
	}()
	// One deadline per phase, not one per put.
	if err := c.SetDeadline(time.Now().Add(p.timeout)); err != nil {
		return nil, err
	}
	for range p.warm {
		if err := s.submit(); err != nil {
			return nil, err
		}
	}
	if err := s.drain(); err != nil {
		return nil, err
	}
	if err := c.SetDeadline(time.Now().Add(p.dur + p.timeout)); err != nil {
		return nil, err
	}
	base := s.completed
	t0 := time.Now()
	cpu := bench.StartCPU()
	for time.Since(t0) < p.dur {
		if err := s.submit(); err != nil {
			return nil, err
		}
	}
	if err := s.drain(); err != nil {
		return nil, err
	}
	puts := s.completed - base
	wall := time.Since(t0)
	r := &result{Tool: "tcpfloor", Size: p.size, Window: p.window, Frame: maxFrame, Puts: puts, Seconds: wall.Seconds(),
		CPU: cpu.Use(puts, wall), GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0)}
	r.MBs = float64(puts) * float64(p.size) / wall.Seconds() / (1 << 20)
	r.PutsPerSec = float64(puts) / wall.Seconds()
	if err := c.SetDeadline(time.Now().Add(p.timeout)); err != nil {
		return nil, err
	}
	putHead(s.head[:], 0, endID, 0)
	if _, err := c.Write(s.head[:]); err != nil {
		return nil, err
	}
	// The end's answer closes done.
	if err := s.complete(); !errors.Is(err, errEnded) {
		if err == nil {
			err = errors.New("a completion after the last put")
		}
		return nil, err
	}
	r.Verified = s.verified
	if !r.Verified {
		return r, errors.New("the receiver's destination does not hold the source's bytes")
	}
	return r, nil
}
