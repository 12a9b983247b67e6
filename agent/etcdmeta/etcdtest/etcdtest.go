// Package etcdtest runs a real etcd server (go.etcd.io/etcd/server/v3/embed)
// inside a test process, on loopback ports in a temporary directory, for
// the tests of any package: Start it, hand its URL to clients (or to a
// re-exec'd child process), Stop and Restart it on the same ports and data
// directory to test what happens while etcd is down, Close it at the end.
//
// Clients reach the server through a small TCP relay on the public port
// (URL). Stop closes the relay's listener and every relayed connection
// before it stops etcd: clients see the service vanish at once (connection
// refused until Restart), and etcd's shutdown does not wait out its 5 s+
// grace period for the clients' open watch streams.
//
// Leaks: a closed server leaves no goroutine and no descriptor behind (its
// shutdown completes: the relay cuts the clients first, and the grpc
// gateway, which would dial the server itself, is off), so the
// internal/testutil.Main leak check of a package using it needs no
// exceptions. The relay copies through buffers rather than io.Copy, whose
// splice between TCP connections leaves pipes in the runtime's cache.
package etcdtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// EnvURL is the environment variable a test conventionally uses to give a
// re-exec'd child process the server's URL.
const EnvURL = "GXFER_ETCDTEST_URL"

// startTimeout bounds how long Start and Restart wait for etcd to serve.
const startTimeout = 30 * time.Second

// Server is one etcd member on loopback. Its methods are safe for
// concurrent use.
type Server struct {
	dir    string // data directory
	ownDir bool   // dir was made by Start: Close removes it
	// public is the relay's address (the URL clients use); client and
	// peer are etcd's own listen addresses.
	public, client, peer string

	mu    sync.Mutex
	etcd  *embed.Etcd // nil while stopped
	relay *relay      // nil while stopped
	done  bool        // Close was called
}

// Start starts a server with its data in dir ("" for a new temporary
// directory that Close removes).
func Start(dir string) (*Server, error) {
	s := &Server{dir: dir}
	if dir == "" {
		d, err := os.MkdirTemp("", "gxfer-etcdtest-")
		if err != nil {
			return nil, fmt.Errorf("etcdtest: %w", err)
		}
		s.dir, s.ownDir = d, true
	}
	ports, err := freePorts(3)
	if err != nil {
		s.removeDir()
		return nil, err
	}
	s.public, s.client, s.peer = ports[0], ports[1], ports[2]
	if err := s.Restart(); err != nil {
		s.removeDir()
		return nil, err
	}
	return s, nil
}

// New starts a server for one test; the test's cleanup closes it.
func New(tb testing.TB) *Server {
	tb.Helper()
	s, err := Start(tb.TempDir())
	if err != nil {
		tb.Fatalf("etcdtest: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	return s
}

// URL is the client URL ("http://127.0.0.1:port"); it stays the same
// across Stop and Restart.
func (s *Server) URL() string { return "http://" + s.public }

// Endpoints is []string{URL()}, for clientv3.Config.
func (s *Server) Endpoints() []string { return []string{s.URL()} }

// Dir is the server's data directory.
func (s *Server) Dir() string { return s.dir }

// Running reports whether the server is serving (started and not
// stopped).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.etcd != nil
}

// Stop cuts every client connection, refuses new ones, and stops etcd,
// keeping its data. A stopped server is a no-op to Stop.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

func (s *Server) stopLocked() error {
	if s.etcd == nil {
		return nil
	}
	if s.relay != nil {
		s.relay.close()
	}
	s.etcd.Close()
	var err error
	select {
	case e, ok := <-s.etcd.Err():
		if ok && e != nil {
			err = fmt.Errorf("etcdtest: etcd stopped with %w", e)
		}
	default:
	}
	s.etcd, s.relay = nil, nil
	return err
}

// Restart starts the server again on the same ports and data directory
// (its keys and leases are back; etcd extends the leases' deadlines by
// their TTL). It waits until the server serves. A running server is a
// no-op to Restart (use Resume after Pause).
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return errors.New("etcdtest: server closed")
	}
	if s.etcd != nil {
		return nil
	}
	cfg := embed.NewConfig()
	cfg.Name = "gxfer-test"
	cfg.Dir = filepath.Join(s.dir, "etcd")
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.LogLevel = "error"
	cfg.UnsafeNoFsync = true
	cfg.EnableGRPCGateway = false // it dials the server itself
	cu, pu := url.URL{Scheme: "http", Host: s.client}, url.URL{Scheme: "http", Host: s.peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.InitialCluster = cfg.Name + "=" + pu.String()
	if _, err := os.Stat(cfg.Dir); err == nil {
		cfg.ClusterState = embed.ClusterStateFlagExisting
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("etcdtest: start etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcdtest: etcd failed to start: %w", err)
	case <-time.After(startTimeout):
		e.Close()
		return fmt.Errorf("etcdtest: etcd not ready after %v", startTimeout)
	}
	r, err := startRelay(s.public, s.client)
	if err != nil {
		e.Close()
		return err
	}
	s.etcd, s.relay = e, r
	return nil
}

// Pause cuts every client connection and refuses new ones (clients see
// etcd unreachable) while etcd keeps running: DirectEndpoints still reach
// it. A no-op if stopped or paused.
func (s *Server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.relay != nil {
		s.relay.close()
		s.relay = nil
	}
}

// Resume lets clients reach a paused server again.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.etcd == nil || s.relay != nil {
		return nil
	}
	r, err := startRelay(s.public, s.client)
	if err != nil {
		return err
	}
	s.relay = r
	return nil
}

// DirectEndpoints reach etcd itself, bypassing the relay (and so Pause):
// for a test's own client that must act while the clients under test are
// cut off.
func (s *Server) DirectEndpoints() []string { return []string{"http://" + s.client} }

// Close stops the server and removes its data directory if Start made it.
// Idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done {
		return nil
	}
	s.done = true
	err := s.stopLocked()
	s.removeDir()
	return err
}

func (s *Server) removeDir() {
	if s.ownDir {
		_ = os.RemoveAll(s.dir)
	}
}

// freePorts returns n distinct loopback addresses with ports free now.
func freePorts(n int) ([]string, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	var addrs []string
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("etcdtest: free port: %w", err)
		}
		ls = append(ls, l)
		addrs = append(addrs, l.Addr().String())
	}
	return addrs, nil
}

// relay forwards TCP connections from a public address to etcd's.
type relay struct {
	ln      net.Listener
	backend string
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	closed  bool
}

func startRelay(public, backend string) (*relay, error) {
	var ln net.Listener
	var err error
	// The port was ours a moment ago (or before Stop); retry briefly if a
	// closing connection still holds it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		ln, err = net.Listen("tcp", public)
		if err == nil || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return nil, fmt.Errorf("etcdtest: relay listen %s: %w", public, err)
	}
	r := &relay{ln: ln, backend: backend, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.accept()
	return r, nil
}

func (r *relay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		b, err := net.Dial("tcp", r.backend)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !r.track(c, b) {
			return
		}
		r.wg.Add(2)
		go r.pipe(c, b)
		go r.pipe(b, c)
	}
}

// track registers a connection pair; false (both closed) once the relay
// closed.
func (r *relay) track(c, b net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		_ = c.Close()
		_ = b.Close()
		return false
	}
	r.conns[c], r.conns[b] = struct{}{}, struct{}{}
	return true
}

// pipe copies src to dst; when either side ends, both connections close.
// It copies through a buffer: io.Copy between two TCP connections would
// splice through pipes the runtime caches, which a test's fd leak check
// counts.
func (r *relay) pipe(dst, src net.Conn) {
	defer r.wg.Done()
	_, _ = io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, make([]byte, 32<<10))
	_ = dst.Close()
	_ = src.Close()
	r.mu.Lock()
	delete(r.conns, dst)
	delete(r.conns, src)
	r.mu.Unlock()
}

// close stops accepting, cuts every connection and waits for the relay's
// goroutines.
func (r *relay) close() {
	_ = r.ln.Close()
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		_ = c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}
