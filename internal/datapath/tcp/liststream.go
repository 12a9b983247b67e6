package tcp

import (
	"context"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/wire"
)

// maxBatch is the most pieces of memory a Data frame of a list carries
// (wire.Conn.SendDataV: one vectored write); a frame also ends at Chunk
// bytes. Each frame costs a write on the sender and a read on the
// receiver, so lists of small entries want many in a frame: 256 fill a
// frame with entries of 4 KiB, and a frame's pieces plus its neighbours'
// heads stay far below IOV_MAX (1024) in either side's readv or writev.
// (With 64, lists of 1 KiB and 4 KiB entries moved 15-25% slower.)
const maxBatch = 256

// streamer sends the Data frames of one list request, entry after entry:
// host memory in frames of up to Chunk bytes that span entries (the
// receiver's routeV lands each piece where it goes), Gaudi memory through
// sendMem's staging.
type streamer struct {
	p     *path
	id    uint64
	first wire.Message // the request, sent with the first frame (nil once sent)
	stop  func() bool

	sent  uint64   // the stream's bytes whose frames went out
	parts [][]byte // the next frame's pieces, at sent..
	n     uint64   // its bytes
}

// host adds the bytes of b (host memory, or zeros) to the stream.
func (s *streamer) host(b []byte) error {
	for len(b) > 0 {
		// A frame holds at most Chunk bytes (a receiver stages frames
		// for Gaudi memory in buffers of Chunk bytes).
		k := min(uint64(len(b)), Chunk-s.n)
		s.parts = append(s.parts, b[:k])
		s.n += k
		b = b[k:]
		if s.n == Chunk || len(s.parts) == maxBatch {
			if err := s.flush(); err != nil {
				return err
			}
		}
	}
	return nil
}

// zeros adds n zero bytes to the stream.
func (s *streamer) zeros(n uint64) error {
	z := s.p.t.zeros()
	for n > 0 {
		k := min(n, Chunk)
		if err := s.host(z[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// mem adds m's bytes: host memory to the batch, Gaudi memory through
// sendMem (the batch sent first). A failure to read the source
// (errSourceFailed) leaves the stream in step: m's bytes went out as
// zeros.
func (s *streamer) mem(ctx context.Context, m datapath.Mem) error {
	if !m.IsGaudi() {
		return s.host(m.Host())
	}
	if err := s.flush(); err != nil {
		return err
	}
	sent, err := s.p.sendMem(ctx, s.id, s.sent, m, s.first, s.stop)
	if sent > 0 {
		s.first = nil
	}
	s.sent += sent
	return err
}

// flush sends the batch (nothing once stop says so: errStopped).
func (s *streamer) flush() error {
	if len(s.parts) == 0 {
		return nil
	}
	if s.stop() {
		return errStopped
	}
	var msgs []wire.Message
	if s.first != nil {
		msgs = append(s.p.c.TakeReplies(), s.first)
	}
	if err := s.p.c.Conn().SendDataV(msgs, s.id, s.sent, s.parts); err != nil {
		return err
	}
	s.first = nil
	s.sent += s.n
	s.p.bytesOut.Add(s.n)
	clear(s.parts)
	s.parts, s.n = s.parts[:0], 0
	return nil
}
