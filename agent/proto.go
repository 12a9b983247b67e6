package agent

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gxfer/gxfer/agent/meta"
)

// The agent protocol: the messages agents exchange over their endpoints
// (engine.Endpoint Send and Recv), besides the data. Every message is
//
//	magic "gA" | version 1 | type 1 | body
//
// and everything a peer sends is parsed as hostile input: lengths are
// checked against the message and the limits below, unknown types and
// versions are refused, trailing bytes are an error. Errors wrap
// ErrProtocol.
//
// A dialer opens with a hello (its name and incarnation, the incarnation it
// expects to reach, 0 for any, and whether it wants the metadata); the
// acceptor answers with its own hello and, if asked, its metadata record
// (meta.Metadata.Encode) in chunks. Then either side may send: an
// invalidation (the sender republished: version), notifications (dialer to
// acceptor: after the data of a transfer, or standalone), a refusal before
// it closes the endpoint.

const (
	protoVersion = 1
	headerLen    = 4
	// maxMessage is the largest message Endpoint.Send accepts
	// (engine.MaxMessage).
	maxMessage = 64 << 10
	// MaxNotify is the largest notification message, in bytes.
	MaxNotify = maxMessage - headerLen
	// chunkData is the metadata bytes one chunk carries.
	chunkData = maxMessage - headerLen - 8
)

type msgType uint8

const (
	msgHello      msgType = iota + 1 // hello (both directions)
	msgMetaChunk                     // part of an encoded metadata record
	msgInvalidate                    // the sender republished: drop what you cached
	msgNotify                        // an application notification
	msgRefuse                        // the sender refuses this connection (then closes it)
)

func (t msgType) String() string {
	switch t {
	case msgHello:
		return "hello"
	case msgMetaChunk:
		return "metadata chunk"
	case msgInvalidate:
		return "invalidate"
	case msgNotify:
		return "notify"
	case msgRefuse:
		return "refuse"
	}
	return fmt.Sprintf("message type %d", uint8(t))
}

// ErrProtocol: a peer sent a message that does not parse or does not fit
// the protocol's state. Such errors also match engine.ErrPeer when they end
// a connection.
var ErrProtocol = errors.New("agent: protocol error")

// message is one decoded protocol message.
type message struct {
	typ msgType

	// hello
	name        string
	incarnation uint64
	expect      uint64 // the incarnation the dialer expects (0: any)
	version     uint64 // hello: the sender's Version; invalidate: the new one
	wantMeta    bool

	// metadata chunk
	total, off uint32

	// chunk data, notify message, refusal text
	data []byte
}

const helloWantMeta = 1

func protoErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrProtocol, fmt.Sprintf(format, args...))
}

func header(t msgType, n int) []byte {
	b := make([]byte, headerLen, headerLen+n)
	b[0], b[1], b[2], b[3] = 'g', 'A', protoVersion, byte(t)
	return b
}

func encodeHello(name string, inc, expect, version uint64, wantMeta bool) []byte {
	b := header(msgHello, 1+24+1+len(name))
	var f byte
	if wantMeta {
		f = helloWantMeta
	}
	b = append(b, f)
	b = binary.LittleEndian.AppendUint64(b, inc)
	b = binary.LittleEndian.AppendUint64(b, expect)
	b = binary.LittleEndian.AppendUint64(b, version)
	b = append(b, byte(len(name)))
	return append(b, name...)
}

// encodeMeta splits an encoded record into chunk messages.
func encodeMeta(rec []byte) [][]byte {
	var out [][]byte
	for off := 0; off == 0 || off < len(rec); off += chunkData {
		end := min(off+chunkData, len(rec))
		b := header(msgMetaChunk, 8+end-off)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(rec)))
		b = binary.LittleEndian.AppendUint32(b, uint32(off))
		out = append(out, append(b, rec[off:end]...))
		if end == len(rec) {
			break
		}
	}
	return out
}

func encodeInvalidate(version uint64) []byte {
	return binary.LittleEndian.AppendUint64(header(msgInvalidate, 8), version)
}

func encodeNotify(msg []byte) []byte {
	return append(header(msgNotify, len(msg)), msg...)
}

func encodeRefuse(why string) []byte {
	if len(why) > 1024 {
		why = why[:1024]
	}
	return append(header(msgRefuse, len(why)), why...)
}

// decode parses one message. The data of the result aliases b.
func decode(b []byte) (message, error) {
	var m message
	if len(b) < headerLen {
		return m, protoErr("message of %d bytes, shorter than its header", len(b))
	}
	if len(b) > maxMessage {
		return m, protoErr("message of %d bytes, over %d", len(b), maxMessage)
	}
	if b[0] != 'g' || b[1] != 'A' {
		return m, protoErr("bad magic %#x %#x", b[0], b[1])
	}
	if b[2] != protoVersion {
		return m, protoErr("protocol version %d, want %d", b[2], protoVersion)
	}
	m.typ = msgType(b[3])
	body := b[headerLen:]
	switch m.typ {
	case msgHello:
		if len(body) < 26 {
			return m, protoErr("hello of %d bytes", len(body))
		}
		if body[0]&^helloWantMeta != 0 {
			return m, protoErr("hello flags %#x", body[0])
		}
		m.wantMeta = body[0]&helloWantMeta != 0
		m.incarnation = binary.LittleEndian.Uint64(body[1:])
		m.expect = binary.LittleEndian.Uint64(body[9:])
		m.version = binary.LittleEndian.Uint64(body[17:])
		n := int(body[25])
		if n == 0 || len(body) != 26+n {
			return m, protoErr("hello name of %d bytes in %d", n, len(body)-26)
		}
		if m.incarnation == 0 {
			return m, protoErr("hello with incarnation 0")
		}
		m.name = string(body[26:])
		if err := meta.CheckName(m.name); err != nil {
			// No agent can have it (its record would not encode): it
			// would reach Notification.From and the logs as it is.
			return m, protoErr("hello: %v", err)
		}
	case msgMetaChunk:
		if len(body) < 8 {
			return m, protoErr("metadata chunk of %d bytes", len(body))
		}
		m.total = binary.LittleEndian.Uint32(body)
		m.off = binary.LittleEndian.Uint32(body[4:])
		m.data = body[8:]
		switch {
		case m.total == 0 || m.total > meta.MaxRecord:
			return m, protoErr("metadata record of %d bytes", m.total)
		case uint64(m.off)+uint64(len(m.data)) > uint64(m.total):
			return m, protoErr("metadata chunk [%d, +%d) past the record's %d bytes", m.off, len(m.data), m.total)
		case len(m.data) == 0:
			return m, protoErr("empty metadata chunk")
		}
	case msgInvalidate:
		if len(body) != 8 {
			return m, protoErr("invalidate of %d bytes", len(body))
		}
		m.version = binary.LittleEndian.Uint64(body)
	case msgNotify:
		m.data = body
	case msgRefuse:
		if len(body) > 1024 {
			return m, protoErr("refusal of %d bytes", len(body))
		}
		m.data = body
	default:
		return m, protoErr("unknown %v", m.typ)
	}
	return m, nil
}

// assembler collects the chunks of one metadata record, in order. Its
// buffer grows as the chunks arrive (to twice the bytes received at
// most, and never past the record's size): a peer's first chunk may
// claim a record of meta.MaxRecord bytes and carry one.
type assembler struct {
	buf   []byte
	total uint32 // the record's size; 0 before its first chunk
}

// add takes the next chunk; it returns the record once complete.
func (a *assembler) add(m message) ([]byte, bool, error) {
	if a.total == 0 {
		if m.off != 0 {
			return nil, false, protoErr("metadata chunk at %d before the first", m.off)
		}
		a.total, a.buf = m.total, nil
	}
	if m.total != a.total || int(m.off) != len(a.buf) {
		return nil, false, protoErr("metadata chunk [%d of %d] out of order (have %d of %d)", m.off, m.total, len(a.buf), a.total)
	}
	// decode bounded off+len(data) by total.
	if need := len(a.buf) + len(m.data); need > cap(a.buf) {
		b := make([]byte, len(a.buf), min(int(a.total), max(need, 2*cap(a.buf))))
		copy(b, a.buf)
		a.buf = b
	}
	a.buf = append(a.buf, m.data...)
	if len(a.buf) == int(a.total) {
		rec := a.buf
		a.buf, a.total = nil, 0
		return rec, true, nil
	}
	return nil, false, nil
}
