package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"
)

// receiver is the destination of a run and where the next frame goes.
type receiver struct {
	dst  []byte
	next int    // the offset the current put's next frame must start at
	id   uint32 // the current put's id (valid when next > 0)
}

// frame checks a frame header from the sender and returns where its
// payload lands; end is set for the end of the run (no payload), last
// when the payload completes its put.
func (r *receiver) frame(h []byte) (dst []byte, id uint32, last, end bool, err error) {
	n := int(binary.LittleEndian.Uint32(h[0:]))
	id = binary.LittleEndian.Uint32(h[4:])
	off := binary.LittleEndian.Uint64(h[8:])
	if n == 0 {
		if r.next != 0 {
			return nil, 0, false, false, fmt.Errorf("end of run in the middle of put %d", r.id)
		}
		return nil, id, false, true, nil
	}
	switch {
	case n > maxFrame:
		return nil, 0, false, false, fmt.Errorf("frame of %d bytes (at most %d)", n, maxFrame)
	case off != uint64(r.next):
		return nil, 0, false, false, fmt.Errorf("frame at offset %d, expected %d", off, r.next)
	case n > len(r.dst)-r.next:
		return nil, 0, false, false, fmt.Errorf("frame of %d bytes at offset %d overruns the %d-byte destination", n, off, len(r.dst))
	case r.next > 0 && id != r.id:
		return nil, 0, false, false, fmt.Errorf("frame of put %d inside put %d", id, r.id)
	}
	r.id = id
	dst = r.dst[r.next : r.next+n]
	r.next += n
	if r.next == len(r.dst) {
		r.next, last = 0, true
	}
	return dst, id, last, false, nil
}

// listenOnce accepts one sender on addr and receives its run.
func listenOnce(addr string, timeout time.Duration) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	if tl, ok := ln.(*net.TCPListener); ok {
		if err := tl.SetDeadline(time.Now().Add(timeout)); err != nil {
			return err
		}
	}
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	return serve(c, timeout)
}

// serve receives one run on c: puts until the sender ends the run, then
// the answer whether the destination holds the pattern.
func serve(c net.Conn, timeout time.Duration) error {
	var h [headSize]byte
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	size, err := parseHello(h[:])
	if err != nil {
		return err
	}
	r := &receiver{dst: make([]byte, size)}
	// The read deadline moves every 256 frames, not at each (a timer
	// update per frame is not what a floor should pay).
	for frames := 0; ; frames++ {
		if frames&255 == 0 {
			if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
				return err
			}
		}
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return fmt.Errorf("frame header: %w", err)
		}
		dst, id, last, end, err := r.frame(h[:])
		if err != nil {
			return err
		}
		if end {
			want := make([]byte, size)
			fill(want)
			status := uint32(0)
			if bytes.Equal(r.dst, want) {
				status = 1
			}
			reply(h[:], endID, status)
			_, err := c.Write(h[:])
			return err
		}
		if _, err := io.ReadFull(c, dst); err != nil {
			return fmt.Errorf("payload of put %d: %w", id, err)
		}
		if last {
			reply(h[:], id, 0)
			if _, err := c.Write(h[:]); err != nil {
				return err
			}
		}
	}
}
