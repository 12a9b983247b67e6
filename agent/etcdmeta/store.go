// Package etcdmeta is a meta.Store on etcd (go.etcd.io/etcd/client/v3):
// cluster metadata for gxfer agents, as NIXL and Mooncake keep theirs.
//
// Layout: each agent's record (meta.Metadata in its binary encoding) is
// the value of the key Prefix+name, attached to a lease of the publishing
// Store, kept alive while the Store is open. When the agent's process dies
// the keep-alives stop and etcd deletes the record TTL later; Close revokes
// the lease, which deletes it at once. Two live agents cannot share a name:
// Publish refuses (ErrNameTaken) to replace a record of another
// incarnation.
//
// Watches follow one agent's key from the revision of the store's last
// read of it, so nothing between a Lookup and a Watch is missed; they
// survive etcd restarts (the client reconnects and resumes) and
// compactions (the store re-reads the key and reports what changed,
// including a Gone for a record deleted meanwhile).
//
// Values are never trusted: a value that does not decode, or names
// another agent than its key, is treated as no record (logged, skipped by
// List, ErrNotFound from Lookup, Gone for a watcher that knew a record).
//
// Limitation: an etcd whose data was wiped mid-run (a new cluster, its
// revisions restarting at 1) is not detected by running watches.
package etcdmeta

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"github.com/gxfer/gxfer/agent/meta"
)

// Defaults of Config.
const (
	DefaultPrefix         = "/gxfer/agents/"
	DefaultTTL            = 10 * time.Second
	DefaultDialTimeout    = 5 * time.Second
	DefaultRequestTimeout = 5 * time.Second
)

// defaultListPage is Store.listPage: the keys of one List request.
const defaultListPage = 500

// closeTimeout bounds the lease revocation of Close.
const closeTimeout = 2 * time.Second

// Config configures a Store.
type Config struct {
	// Endpoints are etcd client URLs ("http://10.0.0.1:2379"). Required.
	Endpoints []string
	// Prefix of the agents' keys; default DefaultPrefix. A "/" is
	// appended if it does not end with one.
	Prefix string
	// TTL of the store's lease (whole seconds, rounded up; etcd may raise
	// it to its minimum, about 2 s): how long a dead agent's record
	// outlives it. Default DefaultTTL.
	TTL time.Duration
	// DialTimeout bounds Open's first contact with etcd; default
	// DefaultDialTimeout.
	DialTimeout time.Duration
	// RequestTimeout bounds each request of Publish, Lookup and List
	// (each page of a List; besides the caller's context): an
	// unreachable etcd fails them with ErrUnavailable after this long at
	// most. Default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logger receives the store's logs; default none.
	Logger zerolog.Logger
}

// Stats counts the requests a Store made to etcd.
type Stats struct {
	Lookups   uint64 // Lookup calls that sent a request to etcd
	Lists     uint64 // List calls that sent a request to etcd (one each, whatever its pages)
	Publishes uint64 // Publish calls that sent a request to etcd
	Watches   uint64 // Watch calls
	// Requests counts every request to etcd, of any kind (reads, each
	// page of a List, writes, lease grants and revocations, watch
	// re-reads; not the lease keep-alives nor the watch streams
	// themselves).
	Requests uint64
	// LeaseGrants counts leases granted: 1 after the first Publish, one
	// more each time the lease was lost (etcd unreachable for longer
	// than the TTL) and the record republished.
	LeaseGrants uint64
	// Resyncs counts watch interruptions (compaction, stream errors)
	// that made a watch re-read its key.
	Resyncs uint64
	// Malformed counts values found in etcd that did not decode or did
	// not match their key (skipped).
	Malformed uint64
}

// Errors besides those of package meta.
var (
	// ErrClosed: the Store was closed.
	ErrClosed = errors.New("etcdmeta: store closed")
	// ErrNameTaken: Publish found a live record of another incarnation
	// under the name (two agents with one name). Errors matching it are
	// *NameTakenError.
	ErrNameTaken = errors.New("etcdmeta: agent name held by another incarnation")
	// ErrInvalid: a call the store cannot carry out as asked (Open
	// without endpoints, a nil ctx, Publish of a second agent's name).
	ErrInvalid = errors.New("etcdmeta: invalid argument")
)

// NameTakenError says which incarnation holds the name.
type NameTakenError struct {
	Name        string
	Incarnation uint64 // of the live record
	Ours        uint64 // the incarnation that tried to publish
}

func (e *NameTakenError) Error() string {
	return fmt.Sprintf("%v: %q is published by incarnation %#x (this agent is %#x)", ErrNameTaken, e.Name, e.Incarnation, e.Ours)
}

// Is makes the error match ErrNameTaken.
func (e *NameTakenError) Is(target error) bool { return target == ErrNameTaken }

// UnavailableError is an etcd request that failed: it matches
// meta.ErrUnavailable and unwraps to the cause (a gRPC status, or a
// context error when etcd did not answer in time).
type UnavailableError struct {
	Op        string // "lookup", "list", "publish", "open", ...
	Endpoints []string
	Err       error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("%v: etcd %s: %s: %v", meta.ErrUnavailable, strings.Join(e.Endpoints, ","), e.Op, e.Err)
}

// Is makes the error match meta.ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == meta.ErrUnavailable }

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }

// Store is a meta.Store on etcd. Its methods are safe for concurrent use.
type Store struct {
	cfg    Config
	log    zerolog.Logger
	cli    *clientv3.Client
	ctx    context.Context // canceled by Close: ends every goroutine
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// pmu serializes publishing and lease changes; it guards lease,
	// written, published and keeping.
	pmu       sync.Mutex
	lease     clientv3.LeaseID // 0: none yet, or lost
	written   clientv3.LeaseID // the lease the record was last written under
	published *meta.Metadata   // the last record published, to republish
	keeping   bool             // the keep-alive goroutine runs

	// afterGrant, if set (by a test, before the first Publish), runs
	// after each lease grant, pmu held.
	afterGrant func()

	// listPage is the most keys List asks for in one request
	// (defaultListPage; a test may lower it before the first List).
	listPage int64
	// betweenPages, if set (by a test, before the List), runs in List
	// after each page that has a next one, before that next request.
	betweenPages func()
	// watchStarting, if set (by a test, before the Watch), runs first on
	// each watch's goroutine.
	watchStarting func()

	mu     sync.Mutex
	closed bool
	seen   map[string]readState // last read of each name

	stats struct {
		lookups, lists, publishes, watches, requests, grants, resyncs, malformed atomic.Uint64
	}
}

// readState is what the store's last read of one name found.
type readState struct {
	rev     int64 // etcd revision of the read
	present bool
	modRev  int64 // of the record, if present
	meta    meta.Metadata
}

var _ meta.Store = (*Store)(nil)

// Open connects to etcd and checks that it answers (within ctx and
// DialTimeout): an unreachable etcd is an error matching
// meta.ErrUnavailable, no endpoints or a nil ctx ErrInvalid.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("%w: no endpoints", ErrInvalid)
	}
	if ctx == nil {
		return nil, errNilCtx
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(cfg.Prefix, "/") {
		cfg.Prefix += "/"
	}
	if cfg.TTL <= 0 {
		cfg.TTL = DefaultTTL
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		Logger:      zap.NewNop(),
		// Keep-alive pings find a dead connection (etcd host gone
		// without a reset) within seconds.
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		// Reconnect within 2 s of etcd's return (gRPC's default backoff
		// grows to 2 minutes).
		DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 2 * time.Second,
		})},
	})
	if err != nil {
		return nil, &UnavailableError{Op: "open", Endpoints: cfg.Endpoints, Err: err}
	}
	s := &Store{
		cfg:      cfg,
		log:      cfg.Logger.With().Str("component", "etcdmeta").Logger(),
		cli:      cli,
		seen:     map[string]readState{},
		listPage: defaultListPage,
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	octx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	s.stats.requests.Add(1)
	if _, err := cli.Get(octx, cfg.Prefix, clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		s.cancel()
		_ = cli.Close()
		return nil, &UnavailableError{Op: "open", Endpoints: cfg.Endpoints, Err: err}
	}
	return s, nil
}

// Stats returns the store's request counts.
func (s *Store) Stats() Stats {
	return Stats{
		Lookups:     s.stats.lookups.Load(),
		Lists:       s.stats.lists.Load(),
		Publishes:   s.stats.publishes.Load(),
		Watches:     s.stats.watches.Load(),
		Requests:    s.stats.requests.Load(),
		LeaseGrants: s.stats.grants.Load(),
		Resyncs:     s.stats.resyncs.Load(),
		Malformed:   s.stats.malformed.Load(),
	}
}

// Prefix is the key prefix in use (ending with "/").
func (s *Store) Prefix() string { return s.cfg.Prefix }

// Close revokes the store's lease (deleting its record; best effort,
// within 2 s), stops every watch and goroutine, and closes the
// connection. Idempotent.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.pmu.Lock()
	lease := s.lease
	s.lease = 0
	s.pmu.Unlock()
	if lease != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
		s.stats.requests.Add(1)
		if _, err := s.cli.Revoke(ctx, lease); err != nil {
			s.log.Warn().Err(err).Msg("revoking the lease failed; the record lives until it expires")
		}
		cancel()
	}
	return s.cli.Close()
}

// isClosed reports whether Close was called.
func (s *Store) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// key is the etcd key of an agent's record.
func (s *Store) key(name string) string { return s.cfg.Prefix + name }

// reqCtx bounds one request by the caller's context, the store's life and
// RequestTimeout.
// errNilCtx refuses a nil ctx, on which context.WithTimeout panics.
var errNilCtx = fmt.Errorf("%w: nil context", ErrInvalid)

func (s *Store) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.RequestTimeout)
	stop := context.AfterFunc(s.ctx, cancel)
	return ctx, func() { stop(); cancel() }
}

// unavailable wraps a request's error; a request cut by Close is
// ErrClosed.
func (s *Store) unavailable(op string, err error) error {
	if s.ctx.Err() != nil {
		return fmt.Errorf("%w (%s: %v)", ErrClosed, op, err)
	}
	return &UnavailableError{Op: op, Endpoints: s.cfg.Endpoints, Err: err}
}

// decode turns a stored value into a record, or logs why it is not one.
func (s *Store) decode(key string, value []byte) (meta.Metadata, bool) {
	m, err := meta.Decode(value)
	if err == nil && s.key(m.Name) != key {
		err = fmt.Errorf("record of agent %q under key %q", m.Name, key)
	}
	if err != nil {
		s.stats.malformed.Add(1)
		s.log.Warn().Err(err).Str("key", key).Msg("ignoring a malformed record in etcd")
		return meta.Metadata{}, false
	}
	return m, true
}

// sleep waits d or until ctx ends; false if it ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// grow doubles d up to max.
func grow(d, max time.Duration) time.Duration {
	if d *= 2; d > max {
		d = max
	}
	return d
}
