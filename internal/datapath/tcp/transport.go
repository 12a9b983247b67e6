// Package tcp is gxfer's TCP data path. A Put sends its request and then
// the bytes in Data frames on the endpoint's control connection; the
// owner's reader reads each frame's bytes straight into the target (host
// memory) or into a staging buffer that its DMA engine then copies to
// Gaudi memory, and answers with a Completion once every byte has landed.
// A Get is answered with Data frames and then a Completion; the requester
// lands them the same way. Nothing is copied through an intermediate
// buffer on the host path.
//
// Request ids are split between the two sides (the dialer's are odd, the
// acceptor's even: datapath.Ctrl.NewID), so a Data frame names
// unambiguously whose request it belongs to. The reader never writes to
// the socket (a reader blocked on a full send buffer while its peer does
// the same would deadlock both): its replies go through the endpoint's
// writer goroutine (datapath.Ctrl.QueueReply), which also sends the
// heartbeats of every endpoint, whatever its transport.
//
// Cancellation: when the context of a Put or Get ends (or its deadline
// passes) the requester stops sending Data frames and tells the owner
// with a wire.Cancel, when the owner announced wire.CapCancel; an owner
// that did not gets zeros for the rest of a Put (its destination is
// undefined after a failed transfer anyway), and keeps sending a Get's
// bytes, which the requester drops. The operation resolves with the
// context's typed error once no frame reads or writes its local memory.
//
// Lanes: a dialed endpoint opens Config.TCPLanes connections to its peer
// (lanes.go); transfers of laneMin bytes or more are cut into one part per
// lane.
//
// Lists (datapath.Lister, list.go): a list of Puts or Gets moves as one
// wire.PutList or wire.GetList per lane, its entries' bytes streamed back
// to back (Data frames of up to Chunk bytes spanning entries, each one
// vectored write and one vectored read), answered by one
// wire.ListReply with every entry's status; a peer without wire.CapList
// gets the list element by element.
package tcp

import (
	"context"
	"net"
	"sync"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/staging"
	"github.com/gxfer/gxfer/wire"
)

const (
	// Chunk is the bytes per Data frame (and per staging buffer).
	Chunk = 1 << 20
	// MaxFrame is the limit on a control frame of a TCP connection: room
	// for the largest application message (wire.AppMsg) and its header.
	MaxFrame     = wire.MaxAppMsg + 4<<10
	inlineMax    = 64 << 10 // host Puts up to this size are sent by the caller
	MaxInbound   = 4096     // transfers a peer may have in progress toward us (and replies queued)
	StageBuffers = 8        // shared staging buffers per pool (inbound, outbound), Chunk bytes each; a connection has one of its own each way too
)

// Caps are the capabilities a TCP endpoint announces in its Hello.
const Caps = wire.CapInlineData | wire.CapCancel | wire.CapList

// Frame frames a TCP connection for the data path: no Nagle delay (small
// messages are batched by the engine's queues, not the kernel), keepalive
// probes as a second line behind heartbeats, and reads that poll the
// socket for spin (Config.TCPReadSpin) before parking (a peer's answer
// within the window is taken without a goroutine wakeup).
func Frame(c net.Conn, spin time.Duration) *wire.StreamTransport {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
		_ = tc.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3})
	}
	return wire.NewStreamTransport(SpinConn(c, spin))
}

// Transport is the TCP data path engine-wide: the shared staging buffers
// of Gaudi memory, for bytes landing (in) and leaving (out), which each
// connection borrows beside its own (stager).
type Transport struct {
	env     datapath.Env
	in, out *staging.Pool
	zeros   func() []byte // Chunk zero bytes (the rest of a Put an old peer still expects)
	// entries are the entry slices of list requests sent (*[]wire.ListEntry,
	// reused: 24 KB for a request of a thousand entries).
	entries sync.Pool
}

// listEntries is an empty entry slice with room for n.
func (t *Transport) listEntries(n int) []wire.ListEntry {
	if p, _ := t.entries.Get().(*[]wire.ListEntry); p != nil && cap(*p) >= n {
		return (*p)[:0]
	}
	return make([]wire.ListEntry, 0, n)
}

// putListEntries takes back the entries of a request that went out (or
// never will): they were encoded, and nothing reads them any more.
func (t *Transport) putListEntries(e []wire.ListEntry) {
	if cap(e) > 0 {
		e = e[:0]
		t.entries.Put(&e)
	}
}

var _ datapath.Transport = (*Transport)(nil)

// New makes the TCP transport of an engine.
func New(env datapath.Env) *Transport {
	return &Transport{
		env:   env,
		in:    staging.NewPool(env, StageBuffers, Chunk),
		out:   staging.NewPool(env, StageBuffers, Chunk),
		zeros: sync.OnceValue(func() []byte { return make([]byte, Chunk) }),
	}
}

// Kind is datapath.KindTCP.
func (t *Transport) Kind() datapath.Kind { return datapath.KindTCP }

// Connect makes the data path of an endpoint. A dialed endpoint (not
// itself a lane) opens its lanes here when Config.TCPLanes asks for more
// than one connection.
func (t *Transport) Connect(ctx context.Context, c datapath.Ctrl) (datapath.Path, error) {
	p := newPath(t, c)
	if slot, ok := ctx.Value(laneKey{}).(*laneSlot); ok {
		slot.p = p
		p.parent = slot.parent
		return p, nil
	}
	if c.Dialer() && t.env.Config().TCPLanes > 1 {
		p.openLanes(ctx)
	}
	return p, nil
}

// Close frees the staging buffers (every path is closed by then).
func (t *Transport) Close() error {
	err := t.in.Close()
	if err2 := t.out.Close(); err == nil {
		err = err2
	}
	return err
}
