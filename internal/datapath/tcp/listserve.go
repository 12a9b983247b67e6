package tcp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/wire"
)

// lookupList checks every entry of a peer's list request (need: the
// access) and holds the memory of those that pass: the entries as
// segments of the request's stream of bytes (a refused entry's dropped),
// every entry's status, and the first refusal's message. release gives
// the memory back.
//
// An entry of the same key as the one before it that passed is not
// looked up again: its key's checks (signature, access, the buffer's
// state) are made once for the run, and only its range is checked
// (datapath.Env.Lookup: one key's memory is one buffer, at offsets that
// follow the key's). A buffer is held once per run of entries in it (the
// entries refused aside), from the run's first entry: a buffer freed or
// unexported while the run is checked fails no later entry of the run,
// whose memory the hold keeps (as a request checked before the Free).
func (p *path) lookupList(r *wire.ListRequest, need wire.KeyFlags) (segs []seg, sts []wire.Status, msg string, release func()) {
	segs = make([]seg, len(r.Entries))
	sts = make([]wire.Status, len(r.Entries))
	lastKey := -1         // the index in r.Keys of the last entry that passed
	var last datapath.Buf // its memory
	var base uint64       // the Mem offset of its key's allocation offset 0 (modulo 2^64)
	var held datapath.Buf // the buffer of the last entry that passed
	var end uint64
	for i, e := range r.Entries {
		end += e.Length
		segs[i].end = end
		k := &r.Keys[e.Key]
		var mine datapath.Mem
		st, m := wire.StatusNotSupported, ""
		if int(e.Key) == lastKey {
			if start, ok := k.InSpan(e.Offset, e.Length); ok {
				mine, st = datapath.Mem{B: last, Off: base + start, Len: e.Length}, wire.StatusOK
			}
		}
		if st != wire.StatusOK {
			mine, st, m = p.env.Lookup(k, e.Offset, e.Length, need)
			if start, ok := k.InSpan(e.Offset, e.Length); ok && st == wire.StatusOK {
				lastKey, last, base = int(e.Key), mine.B, mine.Off-start
			} else {
				lastKey = -1
			}
		}
		if st == wire.StatusOK && mine.B != held {
			if err := mine.B.Acquire(); err != nil {
				st, m = wire.StatusStale, "buffer no longer exported"
			} else {
				held = mine.B
			}
		}
		if st != wire.StatusOK {
			sts[i] = st
			segs[i].drop = true
			if msg == "" {
				msg = fmt.Sprintf("entry %d: %s", i, m)
				if len(msg) > wire.MaxErrorLen {
					msg = msg[:wire.MaxErrorLen]
				}
			}
			continue
		}
		segs[i].dst = mine
	}
	return segs, sts, msg, func() {
		var held datapath.Buf
		for _, s := range segs {
			if !s.drop && s.dst.B != held {
				s.dst.B.Release()
				held = s.dst.B
			}
		}
	}
}

// servePutList starts landing a peer's PutList (its bytes follow on the
// connection, entry after entry): the bytes of the entries that pass
// land, those of the others are dropped; once all arrived, one ListReply.
func (p *path) servePutList(r *wire.ListRequest) error {
	if p.c.Ours(r.RequestID) {
		return fmt.Errorf("PutList with request id %d of our parity", r.RequestID)
	}
	segs, sts, msg, release := p.lookupList(r, wire.KeyWrite)
	in := &inbound{id: r.RequestID, segs: segs}
	if len(segs) > 0 {
		in.n = segs[len(segs)-1].end
	}
	ok := uint64(0)
	for _, st := range sts {
		if st == wire.StatusOK {
			ok++
		}
	}
	in.onDone = doneFunc(func(err error) {
		release()
		p.answerLanded(in, &wire.ListReply{RequestID: in.id, Statuses: sts, Message: msg}, ok, err)
	})
	return p.startInbound(in)
}

// serveGetList answers a peer's GetList with every entry's bytes in Data
// frames (zeros for those refused) and a ListReply, on a goroutine of its
// own, as serveGet.
func (p *path) serveGetList(r *wire.ListRequest) error {
	if p.c.Ours(r.RequestID) {
		return fmt.Errorf("GetList with request id %d of our parity", r.RequestID)
	}
	id := r.RequestID
	stop := new(atomic.Bool)
	p.mu.Lock()
	if _, dup := p.serving[id]; dup {
		p.mu.Unlock()
		return fmt.Errorf("request id %d reused while in progress", id)
	}
	p.serving[id] = stop
	if p.failed != nil {
		stop.Store(true)
	}
	p.mu.Unlock()
	done := func() {
		p.mu.Lock()
		delete(p.serving, id)
		p.mu.Unlock()
	}
	ok := p.c.Serve(func() wire.Message {
		defer done()
		segs, sts, msg, release := p.lookupList(r, wire.KeyRead)
		if st, refused := refusedBytes(r.Entries, sts); refused > maxRefusedZeros {
			// Zeros keep the stream aligned for small refusals only: a
			// refused entry may name any length.
			release()
			return wire.NewError(id, st, fmt.Sprintf("%s (refused entries of %d bytes: the whole list is refused)", msg, refused))
		}
		err := p.sendListEntries(id, r.Entries, segs, sts, &msg, stop)
		release()
		switch {
		case errors.Is(err, errStopped):
			// Canceled by the peer: nothing more for this request.
		case err == nil:
			for _, st := range sts {
				if st == wire.StatusOK {
					p.served.Add(1)
				}
			}
			return &wire.ListReply{RequestID: id, Statuses: sts, Message: msg}
		default:
			p.c.Fail(p.sendErr(err)) // the stream is broken or the peer gone
		}
		return nil
	})
	if !ok {
		done()
		return p.c.QueueReply(wire.NewError(id, wire.StatusNoResources, "too many requests in progress"))
	}
	return nil
}

// maxRefusedZeros bounds the zeros a GetList's refused entries get in
// the stream; past it the request is refused as a whole (an Error, no
// data), which the requester takes for every entry.
const maxRefusedZeros = 1 << 20

// refusedBytes sums the lengths of the refused entries (saturating) and
// returns the first refused entry's status.
func refusedBytes(entries []wire.ListEntry, sts []wire.Status) (wire.Status, uint64) {
	first, n := wire.StatusOK, uint64(0)
	for i, e := range entries {
		if sts[i] == wire.StatusOK {
			continue
		}
		if first == wire.StatusOK {
			first = sts[i]
		}
		n += min(e.Length, math.MaxUint64-n)
	}
	return first, n
}

// sendListEntries streams a GetList's entries: their bytes, zeros for
// the refused ones and for those whose source failed (their status then
// set, and *msg if it is the first failure).
func (p *path) sendListEntries(id uint64, entries []wire.ListEntry, segs []seg, sts []wire.Status, msg *string, stop *atomic.Bool) error {
	s := &streamer{p: p, id: id, stop: stop.Load}
	for i, e := range entries {
		if e.Length == 0 {
			continue
		}
		var err error
		if sts[i] != wire.StatusOK {
			err = s.zeros(e.Length)
		} else if err = s.mem(context.Background(), segs[i].dst); errors.Is(err, errSourceFailed) {
			sts[i] = wire.StatusInternal
			if *msg == "" {
				*msg = fmt.Sprintf("entry %d: %v", i, err)
				if len(*msg) > wire.MaxErrorLen {
					*msg = (*msg)[:wire.MaxErrorLen]
				}
			}
			err = nil
		}
		if err != nil {
			return err
		}
	}
	return s.flush()
}
