package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
)

// Server serves a registry's metrics over HTTP at /metrics (the
// Prometheus text and protobuf formats, as promhttp negotiates them).
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
	err  error // Serve's error other than ErrServerClosed; read after done

	once     sync.Once
	closeErr error
}

// idleTimeout closes a connection that has had no request for this long
// (without it, net/http keeps an idle keep-alive connection open forever).
// writeTimeout bounds a scrape's response: a client that stops reading
// one larger than the socket buffers would otherwise hold its connection
// and the handler's goroutine until Close. Prometheus gives up on a
// scrape after 10 s by default.
const (
	idleTimeout  = 30 * time.Second
	writeTimeout = 30 * time.Second
)

// maxScrapesInFlight bounds the scrapes served at once; more are refused
// with 503 (Prometheus retries at its next interval).
const maxScrapesInFlight = 4

// gatherEvery spaces the gathers: a scrape within gatherEvery of the last
// gather is served that gather's result, and scrapes that arrive while a
// gather runs wait for it and share it (spacedGatherer). A gather reads
// every registration cache's Stats, which walk the cache's regions under
// the lock its slow path (new registrations, evictions) needs; clients
// scraping in parallel or in a loop would otherwise take that lock from
// copies once per scrape. Prometheus scrapes every 15 s by default.
const gatherEvery = time.Second

// Serve listens on the TCP address addr ("127.0.0.1:9464"; port 0 picks
// one: see Addr) and serves g at /metrics until Close, one connection
// per scrape (no keep-alive). Errors of the collectors are reported in
// the scrape (promhttp.ContinueOnError), a scrape does not fail because
// one metric could not be read. At most maxScrapesInFlight (4) scrapes are
// served at once, others get 503 Service Unavailable; g is gathered at
// most once a second (gatherEvery), scrapes in between are served the
// last gather. A nil g is refused with an error matching os.ErrInvalid.
func Serve(addr string, g prometheus.Gatherer) (*Server, error) {
	return serve(addr, g, idleTimeout, writeTimeout, gatherEvery)
}

// serve is Serve with the idle and write timeouts and the gathers'
// spacing given (tests change them).
func serve(addr string, g prometheus.Gatherer, idle, write, every time.Duration) (*Server, error) {
	if g == nil {
		return nil, fmt.Errorf("metrics: Serve: nil gatherer: %w", os.ErrInvalid)
	}
	g = &spacedGatherer{g: g, every: every}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorHandling: promhttp.ContinueOnError, MaxRequestsInFlight: maxScrapesInFlight,
	}))
	s := &Server{ln: ln, done: make(chan struct{}), srv: &http.Server{
		Handler: mux, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: idle, WriteTimeout: write,
	}}
	// Each scrape on its own connection, closed after the response: a
	// scraper holds no connection (and no goroutine and descriptor of
	// this process) between its scrapes, which Prometheus makes every
	// 15 s by default, within any idle timeout (gxfer soak counts what
	// its process holds after the run).
	s.srv.SetKeepAlivesEnabled(false)
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.err = err
		}
	}()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is the address of the metrics page ("http://ADDR/metrics").
func (s *Server) URL() string { return "http://" + s.Addr() + "/metrics" }

// Close stops the server: it stops listening, lets the scrapes in
// progress finish for up to five seconds, then closes every connection;
// it returns once the serving goroutine has ended. A scrape still running
// after the five seconds (a collector that blocks) is not waited for: its
// handler ends when its collector returns. Idempotent.
func (s *Server) Close() error {
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.srv.Shutdown(ctx); err != nil {
			_ = s.srv.Close()
			s.closeErr = err
		}
		<-s.done
		if s.closeErr == nil {
			s.closeErr = s.err
		}
	})
	return s.closeErr
}

// spacedGatherer gathers g at most once per every: a Gather within every
// of the last one returns its result (the families are only read by the
// handlers that encode them), and a Gather while one runs waits for it.
type spacedGatherer struct {
	g     prometheus.Gatherer
	every time.Duration

	mu  sync.Mutex
	at  time.Time // when the last gather ended (zero: none yet)
	mfs []*dto.MetricFamily
	err error
}

func (s *spacedGatherer) Gather() ([]*dto.MetricFamily, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.at.IsZero() || time.Since(s.at) >= s.every {
		s.mfs, s.err = s.g.Gather()
		s.at = time.Now()
	}
	return s.mfs, s.err
}
