package etcdmeta

import (
	"context"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gxfer/gxfer/agent/meta"
)

// watch follows one agent's key. Its fields other than stopped belong to
// its goroutine.
type watch struct {
	name    string
	key     string
	fn      func(meta.Event)
	ctx     context.Context
	cancel  context.CancelFunc
	stopped atomic.Bool

	rev    int64 // next revision to watch from
	known  bool  // a record is live, as far as the watch knows
	modRev int64 // etcd revision of that record
	last   meta.Metadata
}

// Watch calls fn for every change of the named agent's record from the
// store's last read of it before the call (Lookup or List; a read after
// Watch returns does not move the start; if there was none, the watch
// reads the key first and reports the record it finds as a Put): a Put
// for a new record or Version, a Gone when the record is deleted
// (its lease ended or Close revoked it) or replaced by a malformed value.
// A Put of another incarnation than the last one seen always follows a
// Gone of that one. Calls are sequential, in the order of etcd's
// revisions, on a goroutine of the watch; fn must not block for long.
//
// If the watch is interrupted (etcd compacted the revisions it needs,
// or the stream failed), it re-reads the key and reports what changed
// meanwhile (a Gone for a record that vanished), then follows on. While
// etcd is unreachable the watch waits for it; nothing is reported.
//
// A watch of a name no record can have (see meta.CheckName) runs nothing
// and never calls fn.
//
// stop ends the watch: once it returns, fn is not called again except for
// a call already in progress (so stop may be called from fn). Close ends
// every watch and waits for their goroutines.
func (s *Store) Watch(name string, fn func(meta.Event)) (stop func()) {
	s.stats.watches.Add(1)
	w := &watch{name: name, key: s.key(name), fn: fn}
	w.ctx, w.cancel = context.WithCancel(s.ctx)
	stop = func() {
		w.stopped.Store(true)
		w.cancel()
	}
	// A name no record can have (meta.CheckName) never changes: nothing
	// to follow (and the re-reads of a key etcd refuses would go on
	// until Close).
	// The last read is taken now, the caller's: a later read (another
	// caller's Lookup before the goroutine runs) must not move the start
	// past changes the caller has not seen.
	st, read := s.lastRead(name)
	if meta.CheckName(name) != nil || !s.spawn(func() { s.runWatch(w, st, read) }) {
		stop()
	}
	return stop
}

// runWatch follows w from the last read st (read: there was one; else
// it reads the key first).
func (s *Store) runWatch(w *watch, st readState, read bool) {
	defer w.cancel()
	if s.watchStarting != nil {
		s.watchStarting()
	}
	if read {
		w.rev, w.known, w.modRev, w.last = st.rev+1, st.present, st.modRev, st.meta
	} else if !s.retryResync(w) {
		return
	}
	for {
		s.follow(w)
		if w.ctx.Err() != nil {
			return
		}
		s.stats.resyncs.Add(1)
		if !s.retryResync(w) {
			return
		}
	}
}

// follow delivers the events of w's key from w.rev until the stream fails
// (compaction, lost leader) or the watch ends.
func (s *Store) follow(w *watch) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(w.ctx))
	defer cancel()
	for resp := range s.cli.Watch(ctx, w.key, clientv3.WithRev(w.rev)) {
		if err := resp.Err(); err != nil {
			if w.ctx.Err() == nil {
				s.log.Debug().Err(err).Str("agent", w.name).Int64("rev", w.rev).Msg("watch interrupted; re-reading")
			}
			return
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision < w.rev {
				continue // already seen
			}
			w.rev = ev.Kv.ModRevision + 1
			if ev.Type == clientv3.EventTypeDelete {
				w.gone()
				continue
			}
			if m, ok := s.decode(w.key, ev.Kv.Value); ok {
				w.put(m, ev.Kv.ModRevision)
			} else {
				w.gone()
			}
		}
	}
}

// retryResync re-reads w's key until it succeeds (true) or the watch ends.
func (s *Store) retryResync(w *watch) bool {
	d := 100 * time.Millisecond
	for !s.resync(w) {
		if !sleep(w.ctx, d) {
			return false
		}
		d = grow(d, 2*time.Second)
	}
	return true
}

// resync reads w's key and delivers the difference from what the watch
// knew. False if the read failed.
func (s *Store) resync(w *watch) bool {
	ctx, cancel := context.WithTimeout(w.ctx, s.cfg.RequestTimeout)
	defer cancel()
	s.stats.requests.Add(1)
	resp, err := s.cli.Get(ctx, w.key)
	if err != nil {
		if w.ctx.Err() == nil {
			s.log.Debug().Err(err).Str("agent", w.name).Msg("watch re-read failed; retrying")
		}
		return false
	}
	w.rev = resp.Header.Revision + 1
	var (
		m      meta.Metadata
		ok     bool
		modRev int64
	)
	if len(resp.Kvs) == 1 {
		modRev = resp.Kvs[0].ModRevision
		m, ok = s.decode(w.key, resp.Kvs[0].Value)
	}
	switch {
	case !ok:
		w.gone()
	case !w.known || modRev != w.modRev:
		w.put(m, modRev)
	}
	return true
}

// put records and reports a new record (after a Gone of the previous
// incarnation, if this is another).
func (w *watch) put(m meta.Metadata, modRev int64) {
	if w.known && w.last.Incarnation != m.Incarnation {
		w.gone()
	}
	w.known, w.modRev, w.last = true, modRev, m
	w.deliver(meta.Event{Kind: meta.Put, Name: w.name, Meta: clone(m)})
}

// gone reports the end of the known record, if any.
func (w *watch) gone() {
	if !w.known {
		return
	}
	w.known, w.modRev = false, 0
	w.deliver(meta.Event{Kind: meta.Gone, Name: w.name, Meta: w.last})
	w.last = meta.Metadata{}
}

func (w *watch) deliver(ev meta.Event) {
	if w.stopped.Load() || w.ctx.Err() != nil {
		return
	}
	w.fn(ev)
}
