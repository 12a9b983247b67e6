package handshake

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"
)

// lockedBuffer is a log's output, written by the listener's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// lines are the log's lines, decoded.
func (b *lockedBuffer) lines(t *testing.T) []map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(b.b.Bytes()))
	for sc.Scan() {
		var m map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &m), "%s", sc.Bytes())
		out = append(out, m)
	}
	return out
}

// count is how many lines have message msg; sum adds up their field
// (a number).
func count(lines []map[string]any, msg, field string) (n, sum int) {
	for _, l := range lines {
		if l["message"] == msg {
			n++
			if v, ok := l[field].(float64); ok {
				sum += int(v)
			}
		}
	}
	return n, sum
}

// TestFailedHandshakesLogThrottled: a peer opening connections that fail
// their handshake (garbage bytes) in a loop gets logBurst Warn lines per
// interval, then one line that counts the others. Each failure was
// logged at Warn: a flood filled the logs.
func TestFailedHandshakesLogThrottled(t *testing.T) {
	const n = 5 * logBurst
	var buf lockedBuffer
	ls := newSide(t, nil, false)
	ls.local.Logger = zerolog.New(&buf)
	clock := time.Unix(1000, 0) // the interval never ends in this test
	l, err := Listen(ListenConfig[*peer]{Local: ls.local, Network: "tcp", Addr: "127.0.0.1:0", MaxPeers: 8, Connect: ls.connect,
		now: func() time.Time { return clock }})
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	for range n {
		c, err := net.Dial("tcp", l.Addr())
		require.NoError(t, err)
		_, err = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
		require.NoError(t, err)
		require.NoError(t, c.SetReadDeadline(time.Now().Add(time.Minute))) // a hang guard only
		_, err = io.Copy(io.Discard, c)                                    // until the listener closes it: its handshake failed
		require.NoError(t, err)
		require.NoError(t, c.Close())
	}
	require.NoError(t, l.Close()) // every handshake has ended (and been logged)
	lines := buf.lines(t)
	logged, _ := count(lines, "handshake failed", "")
	require.Equal(t, logBurst, logged, "handshake failures logged")
	summaries, suppressed := count(lines, "failed connections not logged (at most burst are logged per interval)", "suppressed")
	require.Equal(t, 1, summaries)
	require.Equal(t, n-logBurst, suppressed)
}

// TestLogThrottle: logBurst failures logged per interval, the others
// counted and reported with the first one logged after the interval,
// and at flush; nothing to report, no summary.
func TestLogThrottle(t *testing.T) {
	var buf lockedBuffer
	clock := time.Unix(1000, 0)
	th := newLogThrottle(zerolog.New(&buf), func() time.Time { return clock })
	fail := func(k int) {
		for range k {
			th.warn().Msg("failed")
		}
	}
	for _, step := range []struct {
		name       string
		failures   int
		advance    time.Duration // before the failures
		flush      bool
		logged     int // lines "failed" so far
		summaries  int
		suppressed int // their total so far
	}{
		{"a burst", logBurst, 0, false, logBurst, 0, 0},
		{"beyond it", 7, 0, false, logBurst, 0, 0},
		{"just before the interval ends", 1, logInterval - 1, false, logBurst, 0, 0},
		{"next interval", 3, 1, false, logBurst + 3, 1, 8},
		{"flush with nothing suppressed", 0, 0, true, logBurst + 3, 1, 8},
		{"beyond the second burst", logBurst, 0, false, 2 * logBurst, 1, 8},
		{"flush", 0, 0, true, 2 * logBurst, 2, 11},
		{"flush again", 0, 0, true, 2 * logBurst, 2, 11},
	} {
		clock = clock.Add(step.advance)
		fail(step.failures)
		if step.flush {
			th.flush()
		}
		lines := buf.lines(t)
		logged, _ := count(lines, "failed", "")
		summaries, suppressed := count(lines, "failed connections not logged (at most burst are logged per interval)", "suppressed")
		require.Equal(t, step.logged, logged, step.name)
		require.Equal(t, step.summaries, summaries, step.name)
		require.Equal(t, step.suppressed, suppressed, step.name)
	}
	// An interval's logBurst-th line says the next are counted: the
	// last one logged was the second interval's.
	var nth map[string]any
	for _, l := range buf.lines(t) {
		if l["message"] == "failed" {
			nth = l
		}
	}
	require.NotEmpty(t, nth["throttle"])
}

// TestHandshakesEndedByCloseNotLogged: the handshakes in progress when
// the listener closes end without a "handshake failed" line: Close ended
// them, no peer misbehaved. Before, each was logged at Warn, noise in
// every shutdown's log.
func TestHandshakesEndedByCloseNotLogged(t *testing.T) {
	const silent = 4 // connections that never say Hello
	var buf lockedBuffer
	ls, ds := newSide(t, nil, false), newSide(t, nil, false)
	ls.local.Logger = zerolog.New(&buf)
	l, err := Listen(ListenConfig[*peer]{Local: ls.local, Network: "tcp", Addr: "127.0.0.1:0", MaxPeers: 8, Connect: ls.connect,
		HandshakeTimeout: time.Minute}) // a hang guard only: Close ends the handshakes
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	for range silent {
		c, err := net.Dial("tcp", l.Addr())
		require.NoError(t, err)
		defer c.Close()
	}
	// A Dial after them is served once the listener has taken them all
	// (it accepts in order): their handshakes are in progress.
	_, err = ds.dial(l, "tcp", 0, false)
	require.NoError(t, err)
	require.NoError(t, l.Close()) // every handshake has ended (and been logged, if at all)
	logged, _ := count(buf.lines(t), "handshake failed", "")
	require.Zero(t, logged, "handshakes ended by Close logged as failed")
}
