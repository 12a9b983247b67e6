package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/gxfer/gxfer/bench"
)

// stderrIsTerminal reports whether w is a terminal; the progress bar is
// drawn only then, so piped or redirected output stays clean. A variable
// so tests can force it.
var stderrIsTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progressBar draws one self-overwriting line on a terminal. Its methods
// are safe on a nil *progressBar (no bar).
type progressBar struct {
	mu    sync.Mutex
	w     io.Writer
	start time.Time
	shown bool
}

func newProgressBar(w io.Writer) *progressBar {
	return &progressBar{w: w, start: time.Now()}
}

const barWidth = 30

func (b *progressBar) update(p bench.Progress) {
	if b == nil || p.Total == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	frac := (float64(p.Done) + p.Fraction) / float64(p.Total)
	frac = min(max(frac, 0), 1)
	full := int(frac * barWidth)
	bar := strings.Repeat("=", full)
	if full < barWidth {
		bar += ">" + strings.Repeat(" ", barWidth-full-1)
	}
	what := ""
	if p.Test != "" {
		what = fmt.Sprintf("  %s %s", p.Test, bench.FormatSize(p.Size))
	}
	// \r returns to the start of the line, ESC[K clears the rest of it.
	fmt.Fprintf(b.w, "\r[%s] %3.0f%%  %d/%d%s  %.1fs\x1b[K", bar, frac*100, min(p.Done+1, p.Total), p.Total, what, time.Since(b.start).Seconds())
	b.shown = true
}

// clear erases the bar so other output can use the line.
func (b *progressBar) clear() {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shown {
		fmt.Fprint(b.w, "\r\x1b[K")
		b.shown = false
	}
}
