package handshake

import (
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Failed connections are logged at Warn, but a peer opening connections
// in a loop must not fill the logs: a listener logs the first logBurst
// failures of each logInterval and counts the others, which it reports
// in one line with the next failure it logs (a later interval's) and
// when it closes.
const (
	logBurst    = 10
	logInterval = 10 * time.Second
)

// logThrottle is a listener's: warn gives the event of a failure to log,
// or nil (zerolog's nil *Event logs nothing) when it is counted instead.
type logThrottle struct {
	log zerolog.Logger
	now func() time.Time

	mu         sync.Mutex
	start      time.Time // of the interval
	logged     int       // in the interval
	suppressed int       // since the last summary
}

func newLogThrottle(log zerolog.Logger, now func() time.Time) *logThrottle {
	if now == nil {
		now = time.Now
	}
	return &logThrottle{log: log, now: now}
}

// warn is the Warn event of one failure, nil when it is not logged.
func (t *logThrottle) warn() *zerolog.Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now := t.now(); t.start.IsZero() || now.Sub(t.start) >= logInterval {
		t.summaryLocked()
		t.start, t.logged = now, 0
	}
	if t.logged >= logBurst {
		t.suppressed++
		return nil
	}
	t.logged++
	e := t.log.Warn()
	if t.logged == logBurst {
		e = e.Str("throttle", "the next failures of this interval are counted, not logged")
	}
	return e
}

// flush reports the failures not logged (at Close).
func (t *logThrottle) flush() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.summaryLocked()
}

func (t *logThrottle) summaryLocked() {
	if t.suppressed == 0 {
		return
	}
	t.log.Warn().Int("suppressed", t.suppressed).Dur("interval", logInterval).Int("burst", logBurst).
		Msg("failed connections not logged (at most burst are logged per interval)")
	t.suppressed = 0
}
