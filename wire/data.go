package wire

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/racesync"
)

// MaxDataPayload is the largest Data payload a stream receiver accepts
// when it routes Data frames (see [Conn.RecvRouted]); senders on stream
// transports cut larger transfers into frames of at most this size.
const MaxDataPayload = 4 << 20

// dataHeadSize is the part of a Data frame before its bytes: the header
// and the offset.
const dataHeadSize = HeaderSize + 8

// DataSink chooses where the bytes of a Data frame go, given the frame's
// request id, offset and length (all untrusted: the sink validates them).
// It returns a slice of exactly n bytes, or nil to have the bytes read and
// dropped (a request the receiver gave up on). An error stops the
// connection: the stream cannot be resynchronised.
type DataSink func(reqID, offset uint64, n int) ([]byte, error)

// DataSinkV is a DataSink for Data frames whose bytes go to several
// places (a frame of a descriptor list carries bytes of several entries):
// it appends to into the slices the payload fills in order, n bytes in
// all, or returns nil to have the bytes read and dropped. An error stops
// the connection.
type DataSinkV func(reqID, offset uint64, n int, into [][]byte) ([][]byte, error)

// routedStream is implemented by transports that can read a Data payload
// straight into memory chosen by a sink and send one from the caller's
// memory without copying it: [StreamTransport].
type routedStream interface {
	writeFramed(pre, body []byte, copyMax int) error
	writeFramedV(v net.Buffers) error
	RecvRouted(buf []byte, route func(head []byte, n int) ([][]byte, error)) (n int, routed bool, err error)
}

// writeFramed writes pre, which already holds whole length-prefixed frames
// and the prefix and head of a last frame, then body, the rest of that last
// frame: copied behind pre into one write when it is at most copyMax
// bytes, else with writev. A write that fails part-way breaks the stream
// (the peer can no longer find the next frame boundary).
func (s *StreamTransport) writeFramed(pre, body []byte, copyMax int) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	return s.writeFramedLocked(pre, body, copyMax)
}

// writeFramedLocked is writeFramed with wmu held.
func (s *StreamTransport) writeFramedLocked(pre, body []byte, copyMax int) error {
	if s.wbroken != nil {
		return s.wbroken
	}
	var (
		n   int64
		err error
	)
	if len(body) <= copyMax {
		b := append(append(s.wbuf[:0], pre...), body...)
		s.wbuf = b[:0]
		racesync.Sending([][]byte{b})
		var m int
		m, err = s.c.Write(b)
		n = int64(m)
	} else {
		s.wv2 = [2][]byte{pre, body}
		n, err = s.writev(s.wv2[:])
		s.wv2 = [2][]byte{}
	}
	return s.wrote(n, err)
}

// wrote is the outcome of a write of whole frames that sent n bytes (wmu
// held): a failure that sent nothing leaves the stream intact, one part-way
// breaks it.
func (s *StreamTransport) wrote(n int64, err error) error {
	if err != nil && n == 0 {
		return err // nothing went out: the stream is intact
	}
	if err != nil {
		s.wbroken = fmt.Errorf("%w: write failed part-way through a frame: %w", ErrBroken, err)
		return s.wbroken
	}
	return nil
}

// BuffersWriter is implemented by connections that wrap another and can
// write a vector of buffers with one system call (net.Buffers.WriteTo
// does so only for the net package's own connections).
type BuffersWriter interface {
	WriteBuffers(v *net.Buffers) (int64, error)
}

// writev writes v with one system call where the connection can (wmu
// held).
func (s *StreamTransport) writev(v net.Buffers) (int64, error) {
	s.wv = v
	defer func() { s.wv = nil }()
	racesync.Sending(v)
	if bw, ok := s.c.(BuffersWriter); ok {
		return bw.WriteBuffers(&s.wv)
	}
	return s.wv.WriteTo(s.c)
}

// writeFramedV writes v, whole length-prefixed frames, with writev (as
// writeFramed: a write that fails part-way breaks the stream).
func (s *StreamTransport) writeFramedV(v net.Buffers) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.wbroken != nil {
		return s.wbroken
	}
	return s.wrote(s.writev(v))
}

// RecvRouted reads one length-prefixed frame into buf, except a Data
// frame's payload when route is not nil: route is given the frame's first
// dataHeadSize bytes (header and offset, in buf) and the payload length,
// and returns where the payload goes, slices it fills in order (nil: read
// and drop it). It returns the bytes of the frame held in buf (all of
// a frame that was not routed; the head of one that was) and whether the
// frame was routed.
func (s *StreamTransport) RecvRouted(buf []byte, route func(head []byte, n int) ([][]byte, error)) (int, bool, error) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	if s.broken != nil {
		return 0, false, s.broken
	}
	n, err := s.readFull(s.rhdr[:])
	if err != nil {
		if n == 0 {
			return 0, false, err
		}
		return 0, false, s.breakWith(fmt.Errorf("wire: stream: truncated length prefix: %w", err))
	}
	l := binary.LittleEndian.Uint32(s.rhdr[:])
	if l == 0 {
		return 0, false, s.breakWith(malformed("stream: zero-length frame"))
	}
	if route == nil && uint64(l) > uint64(len(buf)) {
		return 0, false, s.breakWith(tooLarge(l, len(buf)))
	}
	head := min(int(l), dataHeadSize, len(buf))
	if _, err := s.readFull(buf[:head]); err != nil {
		return 0, false, s.breakWith(truncated(err))
	}
	if route != nil && head == dataHeadSize && l > dataHeadSize && Type(buf[6]) == TypeData {
		dst, err := route(buf[:dataHeadSize], int(l)-dataHeadSize)
		if err != nil {
			return 0, false, s.breakWith(err)
		}
		if dst == nil {
			err = s.discard(int64(l) - dataHeadSize)
		} else {
			err = s.readVec(dst)
		}
		if err != nil {
			return 0, false, s.breakWith(truncated(err))
		}
		s.exact = 0
		if int(l)-dataHeadSize >= streamReadAhead/2 && dst != nil {
			s.exact = exactFrames
		}
		return dataHeadSize, true, nil
	}
	s.exact = max(s.exact-1, 0)
	if uint64(l) > uint64(len(buf)) {
		return 0, false, s.breakWith(tooLarge(l, len(buf)))
	}
	if _, err := s.readFull(buf[head:l]); err != nil {
		return 0, false, s.breakWith(truncated(err))
	}
	return int(l), false, nil
}

func tooLarge(l uint32, have int) error {
	return &detailError{kind: ErrTooLarge, msg: fmt.Sprintf("stream: %d-byte frame, buffer holds %d", l, have)}
}

func truncated(err error) error {
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("wire: stream: truncated frame: %w", err)
}

// SendData sends a Data frame for request reqID carrying p at offset off,
// without copying p on transports that support it (stream transports);
// others get an ordinary frame. len(p) must be 1..MaxDataPayload.
func (c *Conn) SendData(reqID, off uint64, p []byte) error {
	return c.sendWithData(nil, reqID, off, p)
}

// SendWithData sends msgs (frames without fds, e.g. replies and a
// request) and then a Data frame (reqID, off, p), in one write on stream
// transports: a request and the first bytes of its data leave together,
// and replies that were waiting ride along.
func (c *Conn) SendWithData(msgs []Message, reqID, off uint64, p []byte) error {
	return c.sendWithData(msgs, reqID, off, p)
}

func (c *Conn) sendWithData(msgs []Message, reqID, off uint64, p []byte) error {
	if len(p) == 0 || len(p) > MaxDataPayload {
		return invalid("Data: %d bytes (1..%d)", len(p), MaxDataPayload)
	}
	rs, ok := c.t.(routedStream)
	if !ok {
		if err := c.sendEach(msgs); err != nil {
			return err
		}
		return c.Send(&Data{RequestID: reqID, Offset: off, Bytes: p})
	}
	c.lockW()
	defer c.unlockW()
	b, err := c.dataHead(msgs, reqID, off, len(p))
	if err != nil {
		return err
	}
	if err := rs.writeFramed(b, p, 512); err != nil {
		return c.sendErr(err)
	}
	return nil
}

// sendEach sends msgs one by one (a transport that is not a routed
// stream).
func (c *Conn) sendEach(msgs []Message) error {
	for _, m := range msgs {
		if err := c.Send(m); err != nil {
			return err
		}
	}
	return nil
}

// dataHead puts msgs, each behind its length prefix, and the head of a
// Data frame of n payload bytes in the write buffer (wmu held) and arms
// the write deadline: what one write sends before the payload.
func (c *Conn) dataHead(msgs []Message, reqID, off uint64, n int) ([]byte, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	b, err := c.appendMsgs(c.wbuf[:0], msgs)
	if err != nil {
		return nil, err
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(dataHeadSize+n))
	b = Header{Version: Version, Type: TypeData, Length: uint32(8 + n), RequestID: reqID}.Append(b)
	b = appendU64(b, off)
	c.keepWriteBuf(b)
	if err := c.armWriteDeadline(); err != nil {
		return nil, c.sendErr(err)
	}
	return b, nil
}

// SendDataV sends msgs (as SendWithData) and then one Data frame of
// request reqID at offset off whose payload is the parts, one after the
// other, in one vectored write on stream transports: the bytes of several
// pieces of memory (entries of a descriptor list) in one frame, read by a
// DataSinkV. The parts must total 1..MaxDataPayload bytes; empty parts
// are skipped.
func (c *Conn) SendDataV(msgs []Message, reqID, off uint64, parts [][]byte) error {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	if n == 0 || n > MaxDataPayload {
		return invalid("Data: %d bytes (1..%d)", n, MaxDataPayload)
	}
	rs, ok := c.t.(routedStream)
	if !ok {
		if err := c.sendEach(msgs); err != nil {
			return err
		}
		b := make([]byte, 0, n)
		for _, p := range parts {
			b = append(b, p...)
		}
		return c.Send(&Data{RequestID: reqID, Offset: off, Bytes: b})
	}
	c.lockW()
	defer c.unlockW()
	b, err := c.dataHead(msgs, reqID, off, n)
	if err != nil {
		return err
	}
	v := append(c.wv[:0], b)
	for _, p := range parts {
		if len(p) > 0 {
			v = append(v, p)
		}
	}
	err = rs.writeFramedV(v) // (consumes a copy of v's header, not v)
	clear(v)                 // nothing kept reachable from here
	c.wv = v[:0]
	if err != nil {
		return c.sendErr(err)
	}
	return nil
}

// appendMsgs appends msgs behind their length prefixes (frames without
// fds, within the frame limit).
func (c *Conn) appendMsgs(b []byte, msgs []Message) ([]byte, error) {
	for _, m := range msgs {
		if m.Type().FDs() != 0 {
			c.keepWriteBuf(b)
			return b, invalid("%v cannot ride with data (it carries fds)", m.Type())
		}
		start := len(b)
		b = binary.LittleEndian.AppendUint32(b, 0)
		var err error
		if b, err = AppendFrame(b, m); err != nil {
			c.keepWriteBuf(b)
			return b, err
		}
		if len(b)-start-4 > c.maxFrame {
			c.keepWriteBuf(b)
			return b, &detailError{kind: ErrTooLarge, msg: fmt.Sprintf("%v: %d-byte frame exceeds the %d-byte limit", m.Type(), len(b)-start-4, c.maxFrame)}
		}
		binary.LittleEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	}
	return b, nil
}

func (c *Conn) keepWriteBuf(b []byte) {
	if cap(b) <= maxKeptWriteBuf {
		c.wbuf = b[:0]
	}
}

// SetDataSinkV makes RecvRouted route Data frames with sv instead of the
// DataSink it is given (set it before the connection's reader starts).
func (c *Conn) SetDataSinkV(sv DataSinkV) { c.sinkV.Store(&sv) }

// RecvRouted is Recv for connections that carry Data frames: on a stream
// transport the bytes of each Data frame go straight to the memory sink
// chooses (no copy through the receive buffer), and the frame is returned
// as a Header of TypeData with Routed set (the bytes are where sink put
// them; Payload is empty). Other transports fall back to Recv, and their
// Data frames come back as ordinary frames. A Data payload may be up to
// MaxDataPayload bytes whatever MaxFrame is.
func (c *Conn) RecvRouted(ctx context.Context, sink DataSink) (Frame, error) {
	rs, ok := c.t.(routedStream)
	if !ok {
		return c.Recv(ctx)
	}
	return c.recv(ctx, func(buf []byte) (int, bool, []*fd.FD, error) {
		c.sink = sink // (rmu held)
		n, routed, err := rs.RecvRouted(buf, c.routeFn)
		c.sink = nil
		return n, routed, nil, err
	})
}

// route is where RecvRouted's Data frame goes: its DataSinkV's choice, or
// its DataSink's (c.sink; rmu held). head is the frame's first
// dataHeadSize bytes, n its payload's length.
func (c *Conn) route(head []byte, n int) ([][]byte, error) {
	h, err := ParseHeader(head, dataHeadSize+MaxDataPayload)
	if err != nil {
		return nil, err
	}
	if h.NumFDs != 0 || uint64(h.Length) != 8+uint64(n) {
		return nil, malformed("Data: bad header (fds %d, length %d for %d bytes)", h.NumFDs, h.Length, n)
	}
	off := binary.LittleEndian.Uint64(head[HeaderSize:])
	var v [][]byte
	if sv := c.sinkV.Load(); sv != nil {
		if v, err = (*sv)(h.RequestID, off, n, c.vec[:0]); err != nil {
			return nil, err
		}
		got := 0
		for _, p := range v {
			got += len(p)
		}
		if v != nil && got != n {
			return nil, fmt.Errorf("wire: data sink returned %d bytes for a %d-byte payload", got, n)
		}
	} else {
		dst, err := c.sink(h.RequestID, off, n)
		if err != nil {
			return nil, err
		}
		if dst != nil && len(dst) != n {
			return nil, fmt.Errorf("wire: data sink returned %d bytes for a %d-byte payload", len(dst), n)
		}
		if dst != nil {
			v = append(c.vec[:0], dst)
		}
	}
	if v != nil {
		c.vec = v[:0]
	}
	if c.rto > 0 && c.rdl != nil {
		// The sink may have waited for memory: the peer is not to blame
		// for that time.
		_ = c.rdl.SetReadDeadline(time.Now().Add(c.rto))
	}
	return v, nil
}
