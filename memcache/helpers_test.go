package memcache

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// fakeRec is one registration made by fakeReg.
type fakeRec struct {
	addr, length uint64
	access       Access
}

var (
	errBadPage   = errors.New("fake: bad page")
	errReadOnly  = errors.New("fake: write access to a read-only page")
	errTransient = errors.New("fake: transient failure")
)

// fakeReg is a Registrar that records live registrations and reports misuse:
// a Deregister of an unknown or already deregistered value, of a different
// range than was registered, or of a registration someone still holds.
// Register fails for ranges containing a bad page, for write access to a
// read-only page, and while failNext > 0. Values are registration ids (int).
type fakeReg struct {
	pageSize uint64

	mu       sync.Mutex
	next     int
	live     map[int]fakeRec
	dead     map[int]bool
	holds    map[int]*atomic.Int64 // per id: how many references the test holds
	bad      map[uint64]bool       // page number -> registration fails
	readOnly map[uint64]bool       // page number -> write registration fails
	failNext int
	regs     int
	fails    int
	deregs   int
	errs     []string
}

func newFakeReg() *fakeReg {
	return &fakeReg{
		pageSize: 4096,
		live:     map[int]fakeRec{},
		dead:     map[int]bool{},
		holds:    map[int]*atomic.Int64{},
		bad:      map[uint64]bool{},
		readOnly: map[uint64]bool{},
	}
}

// wouldFail reports why registering [addr, addr+length) with access fails
// (ignoring failNext). Called with f.mu held.
func (f *fakeReg) wouldFailLocked(addr, length uint64, access Access) error {
	for p := addr / f.pageSize; p <= (addr+length-1)/f.pageSize; p++ {
		if f.bad[p] {
			return errBadPage
		}
		if f.readOnly[p] && access&(AccessWrite|AccessRemoteWrite) != 0 {
			return errReadOnly
		}
	}
	return nil
}

func (f *fakeReg) Register(addr, length uint64, access Access) (any, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if length == 0 || addr+length < addr {
		f.errs = append(f.errs, fmt.Sprintf("Register of bad range %#x+%#x", addr, length))
	}
	err := f.wouldFailLocked(addr, length, access)
	if err == nil && f.failNext > 0 {
		f.failNext--
		err = errTransient
	}
	if err != nil {
		f.fails++
		return nil, err
	}
	f.next++
	f.live[f.next] = fakeRec{addr, length, access}
	f.holds[f.next] = new(atomic.Int64)
	f.regs++
	return f.next, nil
}

func (f *fakeReg) Deregister(addr, length uint64, value any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	id, _ := value.(int)
	rec, ok := f.live[id]
	switch {
	case f.dead[id]:
		f.errs = append(f.errs, fmt.Sprintf("double Deregister of %d", id))
		return errors.New("fake: double deregister")
	case !ok:
		f.errs = append(f.errs, fmt.Sprintf("Deregister of unknown value %v", value))
		return errors.New("fake: unknown value")
	case rec.addr != addr || rec.length != length:
		f.errs = append(f.errs, fmt.Sprintf("Deregister %d of [%#x,+%#x), registered [%#x,+%#x)", id, addr, length, rec.addr, rec.length))
	}
	if h := f.holds[id].Load(); h != 0 {
		f.errs = append(f.errs, fmt.Sprintf("Deregister of %d [%#x,+%#x) while held %d times", id, addr, length, h))
	}
	delete(f.live, id)
	f.dead[id] = true
	f.deregs++
	return nil
}

// hold returns the test-side hold counter of region r's registration.
func (f *fakeReg) hold(r *Region) *atomic.Int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.holds[r.Value().(int)]
}

// check returns the violations recorded so far.
func (f *fakeReg) check() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.errs) > 0 {
		return fmt.Errorf("registrar misuse: %v", f.errs)
	}
	return nil
}

// checkCache verifies the cache's internal invariants: a well-formed index of
// sorted, non-overlapping, aligned, indexed regions whose counts match the
// bookkeeping, and a hint table sized for them; detached regions out of the
// index and still referenced. If f
// is not nil, the live registrations must be exactly the indexed and detached
// regions, with matching ranges and access.
func checkCache(c *Cache, f *fakeReg) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	root := c.root.Load()
	n, err := checkTree(root)
	if err != nil {
		return err
	}
	if n != c.indexed {
		return fmt.Errorf("index holds %d regions, indexed = %d", n, c.indexed)
	}
	live := map[int]*Region{}
	var bytes uint64
	var prev *Region
	granules := 0
	root.ascend(0, func(k uint64, r *Region) bool {
		switch st := r.state.Load(); {
		case k != r.start:
			err = fmt.Errorf("region [%#x,%#x) indexed under %#x", r.start, r.end, k)
		case st&stateIndexed == 0:
			err = fmt.Errorf("indexed region [%#x,%#x) without stateIndexed", r.start, r.end)
		case r.start%c.align != 0 || r.end%c.align != 0 || r.end <= r.start:
			err = fmt.Errorf("region [%#x,%#x) not aligned to %#x", r.start, r.end, c.align)
		case prev != nil && prev.end > r.start:
			err = fmt.Errorf("regions [%#x,%#x) and [%#x,%#x) overlap", prev.start, prev.end, r.start, r.end)
		}
		if _, ok := c.detached[r]; ok {
			err = fmt.Errorf("indexed region [%#x,%#x) also detached", r.start, r.end)
		}
		prev = r
		bytes += r.Len()
		granules += c.hintKeys(r)
		if v, ok := r.value.(int); ok {
			live[v] = r
		}
		return err == nil
	})
	if err != nil {
		return err
	}
	if granules != c.granules {
		return fmt.Errorf("index holds %d granules, granules = %d", granules, c.granules)
	}
	if t := c.hints.Load(); t != nil && len(t.buckets) < 1<<maxHintShift && t.entries() < granules {
		return fmt.Errorf("hint table of %d entries for %d granules", t.entries(), granules)
	}
	for r := range c.detached {
		if st := r.state.Load(); st&stateIndexed != 0 || st&stateRefs == 0 {
			return fmt.Errorf("detached region [%#x,%#x) in state %#x", r.start, r.end, st)
		}
		bytes += r.Len()
		if v, ok := r.value.(int); ok {
			live[v] = r
		}
	}
	if c.live != c.indexed+len(c.detached) || c.liveBytes != bytes {
		return fmt.Errorf("live %d/%d bytes, indexed %d + detached %d / %d bytes", c.live, c.liveBytes, c.indexed, len(c.detached), bytes)
	}
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.live) != len(live) {
		return fmt.Errorf("registrar has %d live registrations, cache %d", len(f.live), len(live))
	}
	for id, rec := range f.live {
		r := live[id]
		if r == nil || r.start != rec.addr || r.Len() != rec.length || r.access != rec.access {
			return fmt.Errorf("registration %d %+v does not match region %v", id, rec, r)
		}
	}
	return nil
}
