package etcdmeta

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gxfer/gxfer/agent/meta"
)

// publishAttempts bounds Publish's compare-and-swap retries when the key
// keeps changing under it.
const publishAttempts = 8

// Publish writes the record of this store's agent under Prefix+m.Name,
// attached to the store's lease (granted by the first Publish and kept
// alive until Close; re-granted, and the last record republished, if it
// is lost while etcd is unreachable). It replaces the agent's previous
// record; a live record of another incarnation under the name is an
// ErrNameTaken (*NameTakenError), a record that does not encode an error
// matching meta.ErrMalformed, an unreachable etcd meta.ErrUnavailable.
// One store publishes one agent: another name than the first is refused
// (ErrInvalid, as is a nil ctx in every call).
// A record of the published incarnation with a lower Version than the last
// one published is stale: it is not written (and no error: the newer one
// is published).
func (s *Store) Publish(ctx context.Context, m meta.Metadata) error {
	if ctx == nil {
		return errNilCtx
	}
	if s.isClosed() {
		return ErrClosed
	}
	val, err := m.Encode()
	if err != nil {
		return err
	}
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if s.published != nil && s.published.Name != m.Name {
		return fmt.Errorf("%w: this store publishes agent %q, not %q", ErrInvalid, s.published.Name, m.Name)
	}
	if p := s.published; p != nil && p.Incarnation == m.Incarnation && m.Version < p.Version {
		// Stale: a newer record of this agent is published (versions
		// published concurrently reach pmu in any order). Writing it
		// would take back what was published since.
		return nil
	}
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	s.stats.publishes.Add(1)
	if err := s.putLocked(rctx, m, val); err != nil {
		return err
	}
	cp := clone(m)
	s.published = &cp
	if !s.keeping && s.spawn(s.keep) {
		s.keeping = true
	}
	return nil
}

// putLocked writes the record with the store's lease (granting one if it
// has none), unless the key holds a live record of another incarnation.
// pmu is held.
func (s *Store) putLocked(ctx context.Context, m meta.Metadata, val []byte) error {
	key := s.key(m.Name)
	// First try: the key is absent. Else read it in the same request.
	cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	for range publishAttempts {
		if s.lease == 0 {
			if err := s.grantLocked(ctx); err != nil {
				return err
			}
		}
		s.stats.requests.Add(1)
		resp, err := s.cli.Txn(ctx).If(cmp).
			Then(clientv3.OpPut(key, string(val), clientv3.WithLease(s.lease))).
			Else(clientv3.OpGet(key)).Commit()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			// The lease ended (etcd unreachable longer than its TTL)
			// before the keep-alive goroutine noticed: take a new one.
			s.log.Warn().Int64("lease", int64(s.lease)).Msg("lease gone; granting a new one")
			s.lease = 0
			continue
		}
		if err != nil {
			return s.unavailable(fmt.Sprintf("publish %q", m.Name), err)
		}
		if resp.Succeeded {
			s.written = s.lease
			return nil
		}
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 { // deleted meanwhile
			cmp = clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
			continue
		}
		kv := kvs[0]
		if old, ok := s.decode(key, kv.Value); ok && old.Incarnation != m.Incarnation {
			return &NameTakenError{Name: m.Name, Incarnation: old.Incarnation, Ours: m.Incarnation}
		}
		// Our own earlier record (or a malformed value): replace it if
		// it did not change since this read.
		cmp = clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)
	}
	return s.unavailable(fmt.Sprintf("publish %q", m.Name), errors.New("the key kept changing"))
}

// grantLocked takes a new lease; pmu is held.
func (s *Store) grantLocked(ctx context.Context) error {
	ttl := int64((s.cfg.TTL + time.Second - 1) / time.Second)
	s.stats.requests.Add(1)
	resp, err := s.cli.Grant(ctx, ttl)
	if err != nil {
		return s.unavailable("grant lease", err)
	}
	s.stats.grants.Add(1)
	s.lease = resp.ID
	s.log.Debug().Int64("lease", int64(resp.ID)).Int64("ttl", resp.TTL).Msg("lease granted")
	if s.afterGrant != nil {
		s.afterGrant()
	}
	return nil
}

// keep keeps the store's lease alive until Close; when the lease is lost
// (etcd unreachable longer than the TTL, so the client gave up on it, or
// etcd expired it) it takes a new one and republishes.
func (s *Store) keep() {
	for {
		s.pmu.Lock()
		lease := s.lease
		s.pmu.Unlock()
		if lease != 0 {
			ch, err := s.cli.KeepAlive(s.ctx, lease)
			if err == nil {
				for range ch { // the channel closes when the lease is lost
				}
			}
		}
		if s.ctx.Err() != nil {
			return
		}
		s.log.Warn().Int64("lease", int64(lease)).Msg("lease lost; republishing with a new one once etcd answers")
		if !s.recover(lease) {
			return
		}
	}
}

// recover replaces the lost lease old with a new one and republishes the
// last record under it, retrying until it succeeds or the store closes
// (false).
func (s *Store) recover(old clientv3.LeaseID) bool {
	d := 100 * time.Millisecond
	for {
		stop, err := s.republish(old)
		if stop {
			return false
		}
		if err == nil {
			if old != 0 {
				// If etcd kept the old lease (it was only unreachable),
				// it holds nothing now: drop it rather than let it run
				// out.
				ctx, cancel := s.reqCtx(s.ctx)
				s.stats.requests.Add(1)
				_, _ = s.cli.Revoke(ctx, old)
				cancel()
			}
			return true
		}
		var taken *NameTakenError
		if errors.As(err, &taken) {
			s.log.Error().Err(err).Msg("another incarnation took this agent's name while etcd was unreachable; not republishing")
			return true
		}
		s.log.Debug().Err(err).Msg("republish failed; retrying")
		if !sleep(s.ctx, d) {
			return false
		}
		d = grow(d, 2*time.Second)
	}
}

// republish is one attempt of recover. stop: nothing is to be kept alive
// any more (the name was taken by another incarnation): the keep-alive
// goroutine ends, and the next Publish starts over.
func (s *Store) republish(old clientv3.LeaseID) (stop bool, err error) {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	if s.lease != old && s.lease != 0 && s.written == s.lease {
		return false, nil // a new lease holds the record already (Publish, or an earlier attempt)
	}
	if s.published == nil {
		s.lease, s.keeping = 0, false
		return true, nil
	}
	ctx, cancel := s.reqCtx(s.ctx)
	defer cancel()
	if s.lease == old {
		s.lease = 0 // else an earlier attempt's grant, its write failed: use it
	}
	val, err := s.published.Encode()
	if err != nil {
		return false, err // cannot happen: it encoded when published
	}
	if err := s.putLocked(ctx, *s.published, val); err != nil {
		if errors.Is(err, ErrNameTaken) {
			s.published = nil
		}
		return false, err
	}
	s.log.Info().Str("agent", s.published.Name).Int64("lease", int64(s.lease)).Msg("record republished under a new lease")
	return false, nil
}

// spawn runs f on a goroutine Close waits for; false if the store is
// closed.
func (s *Store) spawn(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

// clone deep-copies a record.
func clone(m meta.Metadata) meta.Metadata {
	m.NICs = append([]meta.NIC(nil), m.NICs...)
	secs := make([]meta.Section, len(m.Sections))
	for i, sec := range m.Sections {
		sec.Key = append([]byte(nil), sec.Key...)
		secs[i] = sec
	}
	if m.Sections != nil {
		m.Sections = secs
	}
	return m
}
