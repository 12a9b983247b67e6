package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/wire"
)

// errClasses are the typed errors a failed operation may end with, in the
// order they are matched (an error wrapping several is named by the first).
var errClasses = []struct {
	name string
	err  error
}{
	{"ErrPanic", engine.ErrPanic},
	{"ErrClosed", engine.ErrClosed},
	{"ErrFreed", engine.ErrFreed},
	{"ErrDeviceLost", engine.ErrDeviceLost},
	{"ErrTimeout", engine.ErrTimeout},
	{"ErrAborted", engine.ErrAborted},
	{"ErrDevice", engine.ErrDevice},
	{"ErrPeer", engine.ErrPeer},
	{"ErrInvalid", engine.ErrInvalid},
	{"ErrNotSupported", engine.ErrNotSupported},
	{"ErrQueueFull", engine.ErrQueueFull},
	{"ErrForeign", engine.ErrForeign},
	{"ErrNoDevice", engine.ErrNoDevice},
	{"ErrNoMemory", engine.ErrNoMemory},
	{"context", context.DeadlineExceeded},
	{"context", context.Canceled},
}

// classPeerDeviceLost is the class of a remote operation that failed
// because the owner's device was reset under the buffer it named: the
// owner answers StatusInternal with its ErrDeviceLost's text, which the
// initiator gets as an ErrPeer wrapping that wire.Error (the wire has no
// status of its own for it).
const classPeerDeviceLost = "ErrPeer/device-lost"

// classify names err's typed class, or "untyped".
func classify(err error) string {
	for _, c := range errClasses {
		if errors.Is(err, c.err) {
			if c.name == "ErrPeer" && peerDeviceLost(err) {
				return classPeerDeviceLost
			}
			return c.name
		}
	}
	return "untyped"
}

// peerDeviceLost reports whether err carries the owner's refusal of a
// request because its device was reset (see classPeerDeviceLost).
func peerDeviceLost(err error) bool {
	var we *wire.Error
	return errors.As(err, &we) && we.Code == wire.StatusInternal &&
		strings.Contains(we.Message, engine.ErrDeviceLost.Error())
}

// staleRefusal reports whether err is the owner's refusal of a key whose
// allocation it freed (wire.StatusStale, an ErrInvalid at the initiator).
func staleRefusal(err error) bool {
	var we *wire.Error
	return errors.Is(err, engine.ErrInvalid) && errors.As(err, &we) && we.Code == wire.StatusStale
}

// Report is what a run injected and what survived it.
type Report struct {
	Seed     int64
	Duration time.Duration // wall time of the load phase
	Procs    int
	Netns    string // "used", or why not

	// Injected counts the faults injected per kind (a CS hang or abort:
	// armed for the device's next CS, whether or not one came before it
	// was cleared); Skipped says why a
	// kind that was asked for could not be injected here.
	Injected map[Fault]int
	Skipped  map[Fault]string

	// Ops counts operations per kind: succeeded, and failed by error
	// class (ErrPeer, ErrTimeout, ...).
	Ops map[string]*OpCounts

	BytesVerified uint64 // bytes checked against their pattern after a success
	DialsOK       uint64 // legitimate Dials to a live peer that succeeded
	DialsFailed   uint64 // ... that failed
	Hostile       uint64 // hostile connections opened
	PeerRestarts  uint64
	// DeviceRecoveries counts this process's device buffers freed and
	// allocated again after their device was reset; KeyRefreshes the
	// peers' exported device buffers that were, as the driver learnt of
	// them (new keys).
	DeviceRecoveries uint64
	KeyRefreshes     uint64

	// Violations break a rule the soak checks: wrong bytes after a
	// success, an untyped or unexplained error, a future not resolved in
	// time, a stale key's success, a crashed process, a locked-out
	// listener. Leaks are resources not back to their baseline.
	Violations []string
	Leaks      []string
	Notes      []string

	Baseline, Final Resources
}

// OpCounts are one kind of operation's outcomes.
type OpCounts struct {
	OK     uint64
	Failed map[string]uint64
}

// OK reports whether the run broke no rule and leaked nothing.
func (r *Report) OK() bool { return len(r.Violations) == 0 && len(r.Leaks) == 0 }

// Write prints the summary.
func (r *Report) Write(w io.Writer) {
	fmt.Fprintf(w, "soak: seed %d, %d peer processes, load phase %v, netns: %s\n", r.Seed, r.Procs, r.Duration.Round(time.Millisecond), r.Netns)
	fmt.Fprintln(w, "faults injected:")
	for _, k := range AllFaults {
		if why, ok := r.Skipped[k]; ok {
			fmt.Fprintf(w, "  %-12s skipped: %s\n", k, why)
			continue
		}
		if n, ok := r.Injected[k]; ok {
			switch k {
			case FaultCSHang, FaultCSAbort:
				// Armed for a device's next CS and cleared 300 ms later:
				// whether a CS came meanwhile is not known here.
				fmt.Fprintf(w, "  %-12s %d (armed for the next CS, cleared after 300 ms)\n", k, n)
			default:
				fmt.Fprintf(w, "  %-12s %d\n", k, n)
			}
		}
	}
	fmt.Fprintf(w, "peer restarts %d, hostile connections %d, legitimate dials %d ok / %d failed\n",
		r.PeerRestarts, r.Hostile, r.DialsOK, r.DialsFailed)
	fmt.Fprintf(w, "after device resets: %d buffers of this process allocated again, %d peer buffers exported again\n",
		r.DeviceRecoveries, r.KeyRefreshes)
	fmt.Fprintln(w, "operations (ok / failed by error):")
	var okTotal, failTotal uint64
	for _, k := range slices.Sorted(maps.Keys(r.Ops)) {
		c := r.Ops[k]
		okTotal += c.OK
		var parts []string
		for _, e := range slices.Sorted(maps.Keys(c.Failed)) {
			parts = append(parts, fmt.Sprintf("%s %d", e, c.Failed[e]))
			failTotal += c.Failed[e]
		}
		fmt.Fprintf(w, "  %-16s ok %-7d failed: %s\n", k, c.OK, orNone(strings.Join(parts, ", ")))
	}
	fmt.Fprintf(w, "total: %d ok, %d failed, %.1f MiB verified byte for byte\n", okTotal, failTotal, float64(r.BytesVerified)/(1<<20))
	fmt.Fprintf(w, "resources baseline %s; after %s\n", r.Baseline, r.Final)
	for _, n := range r.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, l := range r.Leaks {
		fmt.Fprintf(w, "LEAK: %s\n", l)
	}
	for _, v := range r.Violations {
		fmt.Fprintf(w, "VIOLATION: %s\n", v)
	}
	if r.OK() {
		// Not every success is read back (a stale key's valid Put, the
		// copies around a timed-out one): the line claims what was.
		fmt.Fprintf(w, "result: PASS (%.1f MiB of successes read back with no wrong byte, every failure typed and explained, every future resolved, no leak)\n",
			float64(r.BytesVerified)/(1<<20))
	} else {
		fmt.Fprintf(w, "result: FAIL (%d violations, %d leaks)\n", len(r.Violations), len(r.Leaks))
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// tally collects a run's counts from many goroutines.
type tally struct {
	mu         sync.Mutex
	ops        map[string]*OpCounts
	injected   map[Fault]int
	violations []string
	vcount     map[string]int
	notes      []string

	bytes, dialsOK, dialsFailed, hostile, restarts atomic.Uint64
	recoveries, keyRefreshes                       atomic.Uint64
}

func newTally() *tally {
	return &tally{ops: map[string]*OpCounts{}, injected: map[Fault]int{}, vcount: map[string]int{}}
}

func (t *tally) op(kind string, err error) {
	cls := ""
	if err != nil {
		cls = classify(err)
	}
	t.opClass(kind, cls)
}

// opClass counts an operation of kind that ended with error class cls
// ("" for success).
func (t *tally) opClass(kind, cls string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := t.ops[kind]
	if c == nil {
		c = &OpCounts{Failed: map[string]uint64{}}
		t.ops[kind] = c
	}
	if cls == "" {
		c.OK++
		return
	}
	c.Failed[cls]++
}

func (t *tally) inject(f Fault) {
	t.mu.Lock()
	t.injected[f]++
	t.mu.Unlock()
}

// violate records a broken rule. Repeats of the same kind beyond 10 are
// counted but not listed.
func (t *tally) violate(kind, format string, args ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.vcount[kind]++
	if t.vcount[kind] <= 10 {
		t.violations = append(t.violations, kind+": "+fmt.Sprintf(format, args...))
	}
}

// note records something worth saying that breaks no rule (at most 50).
func (t *tally) note(format string, args ...any) {
	t.mu.Lock()
	if len(t.notes) < 50 {
		t.notes = append(t.notes, fmt.Sprintf(format, args...))
	}
	t.mu.Unlock()
}

func (t *tally) fill(r *Report) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r.Ops = t.ops
	r.Injected = t.injected
	r.Violations = append(r.Violations, t.violations...)
	for k, n := range t.vcount {
		if n > 10 {
			r.Violations = append(r.Violations, fmt.Sprintf("%s: %d more not listed", k, n-10))
		}
	}
	r.Notes = append(r.Notes, t.notes...)
	r.BytesVerified = t.bytes.Load()
	r.DialsOK, r.DialsFailed = t.dialsOK.Load(), t.dialsFailed.Load()
	r.Hostile = t.hostile.Load()
	r.PeerRestarts = t.restarts.Load()
	r.DeviceRecoveries, r.KeyRefreshes = t.recoveries.Load(), t.keyRefreshes.Load()
}

// Resources are what a process holds that the soak checks returns to its
// baseline.
type Resources struct {
	Goroutines int
	FDs        int
	Maps       int    // lines of /proc/self/maps
	FileMaps   int    // of which map a memfd, a deleted file or a device
	Heap       uint64 // live heap after a GC
	Threads    int

	fileMapList string // this process's file mappings, when measured here
}

func (r Resources) String() string {
	return fmt.Sprintf("goroutines %d, fds %d, mappings %d (memfd/device %d), threads %d, heap %.1f MiB",
		r.Goroutines, r.FDs, r.Maps, r.FileMaps, r.Threads, float64(r.Heap)/(1<<20))
}

// measure takes this process's resources (after a GC).
func measure() Resources {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r := Resources{Goroutines: runtime.NumGoroutine(), FDs: countFDs(), Heap: ms.HeapAlloc, Threads: countThreads()}
	r.Maps, r.FileMaps, r.fileMapList = countMaps()
	return r
}

func countThreads() int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			var n int
			if _, err := fmt.Sscan(v, &n); err == nil {
				return n
			}
		}
	}
	return -1
}

// fdList lists this process's descriptors' targets.
func fdList() []string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		t, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/self/fd/"+e.Name(), &st) == nil {
			t = fmt.Sprintf("%s@%d", t, st.Ino)
		}
		out = append(out, e.Name()+"->"+strings.ReplaceAll(t, " ", "_"))
	}
	return out
}

// memfdInodes are the inodes of this process's open memfds.
func memfdInodes() map[uint64]bool {
	out := map[uint64]bool{}
	for _, f := range fdList() {
		if !strings.Contains(f, "/memfd:") {
			continue
		}
		var ino uint64
		if i := strings.LastIndexByte(f, '@'); i >= 0 {
			if _, err := fmt.Sscan(f[i+1:], &ino); err == nil {
				out[ino] = true
			}
		}
	}
	return out
}

func countFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents) - 1 // the directory's own fd
}

// countMaps counts the mappings, and those of memfds (the engine's host
// memory, peers' imports), deleted files and devices.
func countMaps() (all, file int, list string) {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return -1, -1, ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if l == "" {
			continue
		}
		all++
		f := strings.Fields(l)
		if len(f) >= 6 {
			path := strings.Join(f[5:], " ")
			if strings.HasPrefix(path, "/memfd:") || strings.HasSuffix(path, "(deleted)") || strings.HasPrefix(path, "/dev/") {
				file++
				if file <= 16 {
					list += "; " + f[0] + " " + path
				}
			}
		}
	}
	return all, file, list
}

// slack is what a process may hold over its baseline after a run.
type slack struct {
	goroutines, fds, fileMaps, maps int
	heap                            uint64
}

// driverSlack: this process's engine is closed at the end, so everything
// it held must be gone; the Go runtime keeps the threads it started (each
// a stack mapping and a guard, allowed on top), heap arenas and GC
// metadata (race detector shadow memory too).
var driverSlack = slack{maps: 64 + raceMaps, heap: 24 << 20}

// peerSlack: a peer's engine stays open, with its pools and caches warm
// (staging buffers, validity flags of exported buffers, idle workers):
// bounded, unlike a leak per connection, which thousands of connections
// in a run push past this.
var peerSlack = slack{goroutines: 8, fds: 16, fileMaps: 16, maps: 128 + raceMaps, heap: 32 << 20}

// leaks compares now with base; empty when nothing leaked.
func leaks(who string, base, now Resources, sl slack) []string {
	var out []string
	if now.Goroutines > base.Goroutines+sl.goroutines {
		out = append(out, fmt.Sprintf("%s: %d goroutines, baseline %d (+%d allowed)", who, now.Goroutines, base.Goroutines, sl.goroutines))
	}
	if now.FDs > base.FDs+sl.fds {
		out = append(out, fmt.Sprintf("%s: %d open fds, baseline %d (+%d allowed)", who, now.FDs, base.FDs, sl.fds))
	}
	if now.FileMaps > base.FileMaps+sl.fileMaps {
		out = append(out, fmt.Sprintf("%s: %d mappings of memfds, deleted files or devices, baseline %d (+%d allowed)%s", who, now.FileMaps, base.FileMaps, sl.fileMaps, now.fileMapList))
	}
	allowed := sl.maps + 4*max(0, now.Threads-base.Threads)
	if now.Maps > base.Maps+allowed {
		out = append(out, fmt.Sprintf("%s: %d mappings, baseline %d (+%d allowed)", who, now.Maps, base.Maps, allowed))
	}
	if now.Heap > base.Heap+sl.heap {
		out = append(out, fmt.Sprintf("%s: heap %.1f MiB, baseline %.1f MiB (+%d MiB allowed)", who,
			float64(now.Heap)/(1<<20), float64(base.Heap)/(1<<20), sl.heap>>20))
	}
	return out
}

// settle measures until nothing leaks or the bound passes, and returns
// the last measurement and what still leaks.
func settle(who string, base Resources, sl slack, bound time.Duration, take func() (Resources, error)) (Resources, []string) {
	deadline := time.Now().Add(bound)
	for {
		now, err := take()
		if err != nil {
			return now, []string{fmt.Sprintf("%s: cannot measure: %v", who, err)}
		}
		l := leaks(who, base, now, sl)
		if len(l) == 0 || time.Now().After(deadline) {
			return now, l
		}
		time.Sleep(100 * time.Millisecond)
	}
}
