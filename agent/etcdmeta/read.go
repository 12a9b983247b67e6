package etcdmeta

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gxfer/gxfer/agent/meta"
)

// Lookup returns the live record of the named agent: an error matching
// meta.ErrNotFound if there is none (or only a malformed value),
// meta.ErrUnavailable if etcd did not answer. A name no record can have
// (see meta.CheckName) is ErrNotFound without a request.
func (s *Store) Lookup(ctx context.Context, name string) (meta.Metadata, error) {
	if ctx == nil {
		return meta.Metadata{}, errNilCtx
	}
	if s.isClosed() {
		return meta.Metadata{}, ErrClosed
	}
	if err := meta.CheckName(name); err != nil {
		// No record can have it: not worth a request (nor one etcd
		// refuses, failing as ErrUnavailable).
		return meta.Metadata{}, fmt.Errorf("%w: %w", meta.ErrNotFound, err)
	}
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	s.stats.lookups.Add(1)
	s.stats.requests.Add(1)
	resp, err := s.cli.Get(rctx, s.key(name))
	if err != nil {
		return meta.Metadata{}, s.unavailable(fmt.Sprintf("lookup %q", name), err)
	}
	st := readState{rev: resp.Header.Revision}
	if len(resp.Kvs) == 1 {
		kv := resp.Kvs[0]
		if m, ok := s.decode(string(kv.Key), kv.Value); ok {
			st.present, st.modRev, st.meta = true, kv.ModRevision, m
		}
	}
	s.noteRead(name, st)
	if !st.present {
		return meta.Metadata{}, fmt.Errorf("%w: %q", meta.ErrNotFound, name)
	}
	return st.meta, nil
}

// List returns every live record, sorted by name (malformed values are
// skipped), as of one etcd revision: a record published while List runs
// is not in the list, one deleted meanwhile still is.
//
// The records are read in pages of at most 500 keys, one request each
// (each bounded by RequestTimeout), so that a large cluster's list is
// neither one huge response nor one heavy request for etcd: the first
// page at the current revision, the next ones at that revision, each
// from the key after the previous page's last. If etcd compacts that
// revision before the last page, List reads every page again at a new
// revision, once; a second compaction fails it with ErrUnavailable (a
// history kept too short for the listing).
func (s *Store) List(ctx context.Context) ([]meta.Metadata, error) {
	if ctx == nil {
		return nil, errNilCtx
	}
	if s.isClosed() {
		return nil, ErrClosed
	}
	s.stats.lists.Add(1)
	out, found, rev, err := s.listPages(ctx)
	if errors.Is(err, rpctypes.ErrCompacted) {
		s.log.Debug().Err(err).Msg("list: revision compacted between pages; listing again")
		out, found, rev, err = s.listPages(ctx)
	}
	if err != nil {
		return nil, s.unavailable("list", err)
	}
	// The pages cover every name at rev: those the store knows and did
	// not find are absent at rev.
	s.mu.Lock()
	for name := range s.seen {
		if _, ok := found[name]; !ok {
			found[name] = readState{rev: rev}
		}
	}
	for name, st := range found {
		s.noteReadLocked(name, st)
	}
	s.mu.Unlock()
	return out, nil
}

// listPages reads every key under the prefix, s.listPage keys a request,
// all at the revision of the first request: the records (sorted by
// name), what was found of each valid name, and that revision. The error
// is a request's (rpctypes.ErrCompacted if the revision was compacted
// before the last page).
func (s *Store) listPages(ctx context.Context) (out []meta.Metadata, found map[string]readState, rev int64, err error) {
	found = map[string]readState{}
	from, end := s.cfg.Prefix, clientv3.GetPrefixRangeEnd(s.cfg.Prefix)
	for {
		opts := []clientv3.OpOption{
			clientv3.WithRange(end),
			clientv3.WithLimit(s.listPage),
			// Key order is etcd's own: the client sends no sort, and
			// the server applies the limit without reading the whole
			// range.
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend),
		}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		rctx, cancel := s.reqCtx(ctx)
		s.stats.requests.Add(1)
		resp, err := s.cli.Get(rctx, from, opts...)
		cancel()
		if err != nil {
			return nil, nil, 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision // later pages' headers are etcd's current revision
		}
		for _, kv := range resp.Kvs {
			key := string(kv.Key)
			m, ok := s.decode(key, kv.Value)
			if ok {
				out = append(out, m)
			}
			name := strings.TrimPrefix(key, s.cfg.Prefix)
			if meta.CheckName(name) != nil {
				continue // junk no Lookup or Watch asks about: keep nothing of it
			}
			found[name] = readState{rev: rev, present: ok, modRev: kv.ModRevision, meta: m}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return out, found, rev, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		if s.betweenPages != nil {
			s.betweenPages()
		}
	}
}

// noteRead records a read of name, unless the store knows a later one.
func (s *Store) noteRead(name string, st readState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noteReadLocked(name, st)
}

// The last reads are only where a watch starts (a watch without one reads
// the key itself): a name found absent is forgotten, and at most
// maxSeen names are remembered, so that the names a long-lived store is
// asked about (agents come and go under new names) do not add up.
func (s *Store) noteReadLocked(name string, st readState) {
	old, ok := s.seen[name]
	if ok && old.rev >= st.rev {
		return
	}
	if !st.present {
		delete(s.seen, name)
		return
	}
	if !ok && len(s.seen) >= maxSeen {
		for n := range s.seen { // any one: map order
			delete(s.seen, n)
			break
		}
	}
	s.seen[name] = st
}

// maxSeen bounds Store.seen (noteReadLocked).
const maxSeen = 4096

// lastRead returns the store's last read of name, if any.
func (s *Store) lastRead(name string) (readState, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st, ok := s.seen[name]
	return st, ok
}
