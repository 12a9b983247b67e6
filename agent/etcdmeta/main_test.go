package etcdmeta

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/internal/testutil"
)

// Environment of a re-exec'd child publisher (see runChild).
const (
	envChildName = "GXFER_ETCDMETA_CHILD_NAME"
	envChildInc  = "GXFER_ETCDMETA_CHILD_INCARNATION"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChildName) != "" {
		os.Exit(runChild())
	}
	testutil.Main(m)
}

// runChild is a publisher process: it publishes a record named by its
// environment with a 2 s lease, says "ready", and waits to be killed.
func runChild() int {
	inc, err := strconv.ParseUint(os.Getenv(envChildInc), 10, 64)
	if err != nil {
		fmt.Println("child:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{Endpoints: []string{os.Getenv(etcdtest.EnvURL)}, TTL: 2 * time.Second})
	if err != nil {
		fmt.Println("child:", err)
		return 2
	}
	if err := s.Publish(ctx, record(os.Getenv(envChildName), inc, 1)); err != nil {
		fmt.Println("child:", err)
		return 2
	}
	fmt.Println("ready")
	time.Sleep(time.Hour) // until SIGKILL
	return 0
}

// startChild runs a child publisher and waits for its "ready".
func startChild(t *testing.T, srv *etcdtest.Server, name string, inc uint64) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChildName+"="+name, envChildInc+"="+strconv.FormatUint(inc, 10), etcdtest.EnvURL+"="+srv.URL())
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	require.NoError(t, err, "child output %q", line)
	require.Equal(t, "ready", strings.TrimSpace(line))
	return cmd
}

// record is a small valid record.
func record(name string, inc, version uint64) meta.Metadata {
	return meta.Metadata{
		Name: name, Incarnation: inc, Version: version,
		TCP:      "127.0.0.1:7000",
		Sections: []meta.Section{{Name: "kv", Len: 4096, Location: "host", Key: []byte{1, 2, 3}}},
	}
}

// open opens a store on srv; the test's cleanup closes it.
func open(t *testing.T, srv *etcdtest.Server, ttl time.Duration) *Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, Config{Endpoints: srv.Endpoints(), TTL: ttl, RequestTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// recorder collects a watch's events.
type recorder struct {
	mu     sync.Mutex
	events []meta.Event
	signal chan struct{}
}

func newRecorder() *recorder { return &recorder{signal: make(chan struct{}, 1)} }

func (r *recorder) fn(ev meta.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
	select {
	case r.signal <- struct{}{}:
	default:
	}
}

func (r *recorder) all() []meta.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]meta.Event(nil), r.events...)
}

// waitFor waits (at most limit) until some event satisfies ok, and
// returns it.
func (r *recorder) waitFor(t *testing.T, limit time.Duration, what string, ok func(meta.Event) bool) meta.Event {
	t.Helper()
	deadline := time.After(limit)
	for {
		for _, ev := range r.all() {
			if ok(ev) {
				return ev
			}
		}
		select {
		case <-r.signal:
		case <-deadline:
			t.Fatalf("no %s within %v; events: %+v", what, limit, r.all())
		}
	}
}

// eventually polls f (at most limit) until it returns nil.
func eventually(t *testing.T, limit time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing after %v: %v", limit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
