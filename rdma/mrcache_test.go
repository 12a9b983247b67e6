package rdma

// MRCache tests. The first group runs anywhere, over a fake registrar that
// stands in for ibv_reg_mr and checks that every registration is
// deregistered exactly once; the second registers real MRs and needs an
// RDMA device (the Soft-RoCE VM: testbed/rxe/ci.sh).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/verbs"
	"github.com/gxfer/gxfer/memcache"
)

// fakeMR is a registration made by fakeReg.
type fakeMR struct {
	f            *fakeReg
	addr, length uint64
	access       Access
	key          uint32
	closes       int // guarded by f.mu
}

func (m *fakeMR) LKey() uint32 { return m.key }
func (m *fakeMR) RKey() uint32 { return m.key | 1<<31 }

func (m *fakeMR) Close() error {
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	m.closes++
	if m.closes > 1 {
		m.f.errs = append(m.f.errs, fmt.Errorf("MR %d [%#x, +%#x) deregistered %d times", m.key, m.addr, m.length, m.closes))
		return nil
	}
	delete(m.f.live, m)
	return nil
}

// fakeReg registers nothing but keeps the books: live MRs, how many were
// made, double deregistrations.
type fakeReg struct {
	mu   sync.Mutex
	next uint32
	made int
	live map[*fakeMR]struct{}
	errs []error
	fail func(addr, length uint64) error // nil: never fail
}

func newFakeCache(t *testing.T, cfg MRCacheConfig) (*MRCache, *fakeReg) {
	t.Helper()
	f := &fakeReg{live: map[*fakeMR]struct{}{}}
	c, err := newMRCache(f.register, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = c.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		assert.Empty(t, f.errs)
	})
	return c, f
}

func (f *fakeReg) register(addr, length uint64, access Access) (cachedMR, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		if err := f.fail(addr, length); err != nil {
			return nil, err
		}
	}
	if addr%uint64(os.Getpagesize()) != 0 || length%uint64(os.Getpagesize()) != 0 {
		f.errs = append(f.errs, fmt.Errorf("unaligned registration [%#x, +%#x)", addr, length))
	}
	f.next++
	f.made++
	m := &fakeMR{f: f, addr: addr, length: length, access: access, key: f.next}
	f.live[m] = struct{}{}
	return m, nil
}

// counts returns the registrations made so far and those still live.
func (f *fakeReg) counts() (made, live int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.made, len(f.live)
}

const page = 4096

func TestMRCacheFake(t *testing.T) {
	if os.Getpagesize() != page {
		t.Skipf("the tables assume 4 KiB pages, this system has %d", os.Getpagesize())
	}
	const base = 0x7f0000000000
	rw := AccessLocalWrite | AccessRemoteWrite
	type step struct {
		op           string // get, put, inval, close
		addr, length uint64
		access       Access
		ref          int // get: slot to store the MRRef in; put: slot to put
		// after the step
		made, live int
		key        uint32 // get: the MR's key (0: don't check)
		regAddr    uint64 // get: registered start (0: don't check)
		regLen     uint64
	}
	for _, tc := range []struct {
		name  string
		cfg   MRCacheConfig
		steps []step
	}{{
		name: "repeated Gets on one buffer register once",
		steps: []step{
			{op: "get", addr: base + 100, length: 3 * page, ref: 0, made: 1, live: 1, key: 1, regAddr: base, regLen: 4 * page},
			{op: "put", ref: 0, made: 1, live: 1},
			{op: "get", addr: base + 100, length: 3 * page, ref: 0, made: 1, live: 1, key: 1},
			{op: "get", addr: base + 100, length: 3 * page, ref: 1, made: 1, live: 1, key: 1},
			{op: "put", ref: 0, made: 1, live: 1},
			{op: "put", ref: 1, made: 1, live: 1},
			{op: "get", addr: base + page, length: 1, ref: 0, made: 1, live: 1, key: 1}, // inside: a hit
			{op: "put", ref: 0, made: 1, live: 1},
			{op: "close", made: 1, live: 0},
		},
	}, {
		name: "more access registers again and replaces the old MR",
		steps: []step{
			{op: "get", addr: base, length: page, access: AccessRemoteRead, ref: 0, made: 1, live: 1, key: 1},
			{op: "get", addr: base, length: page, access: rw, ref: 1, made: 2, live: 2, key: 2},
			{op: "put", ref: 0, made: 2, live: 1}, // the replaced one goes at its last Put
			{op: "get", addr: base, length: page, access: AccessRemoteRead, ref: 0, made: 2, live: 1, key: 2},
			{op: "put", ref: 0, made: 2, live: 1},
			{op: "put", ref: 1, made: 2, live: 1},
			{op: "close", made: 2, live: 0},
		},
	}, {
		name: "Invalidate deregisters an idle MR at once",
		steps: []step{
			{op: "get", addr: base, length: 2 * page, ref: 0, made: 1, live: 1},
			{op: "put", ref: 0, made: 1, live: 1},
			{op: "inval", addr: base + page, length: 1, made: 1, live: 0},
			{op: "get", addr: base, length: 2 * page, ref: 0, made: 2, live: 1, key: 2},
			{op: "put", ref: 0, made: 2, live: 1},
		},
	}, {
		name: "Invalidate of a referenced MR waits for its Put",
		steps: []step{
			{op: "get", addr: base, length: page, ref: 0, made: 1, live: 1},
			{op: "inval", addr: base, length: page, made: 1, live: 1},
			{op: "get", addr: base, length: page, ref: 1, made: 2, live: 2, key: 2}, // not served from the invalidated one
			{op: "put", ref: 0, made: 2, live: 1},
			{op: "put", ref: 1, made: 2, live: 1},
			{op: "close", made: 2, live: 0},
		},
	}, {
		name: "Invalidate elsewhere leaves the MR alone",
		steps: []step{
			{op: "get", addr: base, length: page, ref: 0, made: 1, live: 1},
			{op: "put", ref: 0, made: 1, live: 1},
			{op: "inval", addr: base + page, length: page, made: 1, live: 1},
			{op: "get", addr: base, length: page, ref: 0, made: 1, live: 1, key: 1},
			{op: "put", ref: 0, made: 1, live: 1},
		},
	}, {
		name: "Merge joins touching buffers into one MR",
		cfg:  MRCacheConfig{Merge: true},
		steps: []step{
			{op: "get", addr: base, length: page, ref: 0, made: 1, live: 1},
			{op: "put", ref: 0, made: 1, live: 1},
			{op: "get", addr: base + page, length: page, ref: 0, made: 2, live: 1, key: 2, regAddr: base, regLen: 2 * page},
			{op: "put", ref: 0, made: 2, live: 1},
			{op: "get", addr: base, length: 2 * page, ref: 0, made: 2, live: 1, key: 2},
			{op: "put", ref: 0, made: 2, live: 1},
		},
	}, {
		name: "without Merge neighbours get their own MRs",
		steps: []step{
			{op: "get", addr: base, length: page, ref: 0, made: 1, live: 1},
			{op: "get", addr: base + page, length: page, ref: 1, made: 2, live: 2, key: 2, regAddr: base + page, regLen: page},
			{op: "put", ref: 0, made: 2, live: 2},
			{op: "put", ref: 1, made: 2, live: 2},
			{op: "close", made: 2, live: 0},
		},
	}, {
		name: "MaxRegions evicts idle MRs",
		cfg:  MRCacheConfig{MaxRegions: 1},
		steps: []step{
			{op: "get", addr: base, length: page, ref: 0, made: 1, live: 1},
			{op: "put", ref: 0, made: 1, live: 1},
			{op: "get", addr: base + 8*page, length: page, ref: 0, made: 2, live: 1},
			{op: "put", ref: 0, made: 2, live: 1},
		},
	}, {
		name: "Close with a referenced MR: deregistered at its Put",
		steps: []step{
			{op: "get", addr: base, length: page, ref: 0, made: 1, live: 1},
			{op: "get", addr: base + 4*page, length: page, ref: 1, made: 2, live: 2},
			{op: "put", ref: 1, made: 2, live: 2},
			{op: "close", made: 2, live: 1}, // ErrBusy, checked below
			{op: "put", ref: 0, made: 2, live: 0},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			c, f := newFakeCache(t, tc.cfg)
			var refs [2]MRRef
			for i, s := range tc.steps {
				msg := fmt.Sprintf("step %d: %s [%#x, +%#x)", i, s.op, s.addr, s.length)
				switch s.op {
				case "get":
					r, err := c.Get(s.addr, s.length, s.access)
					require.NoError(t, err, msg)
					require.True(t, r.Contains(s.addr, s.length), msg)
					want := s.access
					if want == 0 {
						want = AccessDefault
					}
					assert.Equal(t, want, r.Access()&want, msg)
					if s.key != 0 {
						assert.Equal(t, s.key, r.LKey(), msg)
						assert.Equal(t, s.key|1<<31, r.RKey(), msg)
					}
					if s.regLen != 0 {
						assert.Equal(t, s.regAddr, r.Addr(), msg)
						assert.Equal(t, s.regLen, r.Len(), msg)
					}
					assert.Nil(t, r.MR(), "a fake registration has no *MR")
					refs[s.ref] = r
				case "put":
					c.Put(refs[s.ref])
					refs[s.ref] = MRRef{}
				case "inval":
					c.Invalidate(s.addr, s.length)
				case "close":
					err := c.Close()
					if s.live > 0 {
						assert.ErrorIs(t, err, ErrBusy, msg)
					} else {
						assert.NoError(t, err, msg)
					}
					assert.NoError(t, c.Close(), "second Close")
					_, err = c.Get(base, 1, 0)
					assert.ErrorIs(t, err, ErrClosed, msg)
				default:
					t.Fatalf("bad op %q", s.op)
				}
				made, live := f.counts()
				require.Equal(t, s.made, made, "%s: registrations made", msg)
				require.Equal(t, s.live, live, "%s: live MRs", msg)
				require.Equal(t, live, c.Stats().Regions, msg)
			}
			for _, r := range refs {
				c.Put(r)
			}
			require.NoError(t, c.Close())
			_, live := f.counts()
			assert.Zero(t, live, "MRs leaked after Close")
		})
	}
}

func TestMRCacheSegAndRemote(t *testing.T) {
	c, _ := newFakeCache(t, MRCacheConfig{})
	ps := uint64(os.Getpagesize())
	addr := 0x10000*ps + 10
	r, err := c.Get(addr, 100, AccessDefault)
	require.NoError(t, err)
	defer c.Put(r)
	assert.False(t, r.IsZero())
	assert.True(t, MRRef{}.IsZero())
	assert.Equal(t, addr-10, r.Addr())
	assert.Equal(t, Seg{MR: nil, Off: 10, Len: 100}, r.Seg(addr, 100))
	assert.Equal(t, RemoteMR{Addr: addr, Len: 100, RKey: r.RKey()}, r.Remote(addr, 100))
	c.Put(MRRef{}) // does nothing
}

func TestMRCacheInvalidArguments(t *testing.T) {
	c, f := newFakeCache(t, MRCacheConfig{})
	for _, tc := range []struct {
		name         string
		addr, length uint64
		access       Access
	}{
		{"zero length", 0x1000, 0, 0},
		{"range wraps", math.MaxUint64 - 10, 100, 0},
		{"range reaches the end of the address space", math.MaxUint64 - 10, 11, 0},
		{"remote write without local write", 0x1000, 1, AccessRemoteWrite},
		{"remote atomic without local write", 0x1000, 1, AccessRemoteAtomic | AccessRemoteRead},
		{"unknown access bits", 0x1000, 1, AccessLocalWrite | 1<<30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := c.Get(tc.addr, tc.length, tc.access)
			require.ErrorIs(t, err, ErrInvalid)
			assert.True(t, r.IsZero())
		})
	}
	_, err := c.GetBytes(nil, 0)
	assert.ErrorIs(t, err, ErrInvalid)
	made, _ := f.counts()
	assert.Zero(t, made, "nothing registered for bad arguments")

	_, err = NewMRCache(nil, MRCacheConfig{})
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = newMRCache(f.register, MRCacheConfig{MaxRegions: -1})
	assert.ErrorIs(t, err, ErrInvalid)
}

func TestMRCacheRegistrationFailure(t *testing.T) {
	bad := errors.New("fake: cannot pin")
	c, f := newFakeCache(t, MRCacheConfig{NegativeTTL: time.Hour})
	f.fail = func(addr, _ uint64) error {
		if addr == 0x100000 {
			return bad
		}
		return nil
	}
	_, err := c.Get(0x100000, 10, 0)
	require.ErrorIs(t, err, bad)
	var rerr *memcache.RegisterError
	require.ErrorAs(t, err, &rerr)
	assert.False(t, rerr.Cached)

	_, err = c.Get(0x100000, 10, 0)
	require.ErrorIs(t, err, memcache.ErrRecentlyFailed, "remembered, not retried")
	require.ErrorIs(t, err, bad)

	c.Invalidate(0x100000, 1) // the owner remapped it: forget the failure
	f.mu.Lock()
	f.fail = nil
	f.mu.Unlock()
	r, err := c.Get(0x100000, 10, 0)
	require.NoError(t, err)
	c.Put(r)
	made, live := f.counts()
	assert.Equal(t, 1, made)
	assert.Equal(t, 1, live)
}

func TestMRCacheAccessMapping(t *testing.T) {
	for _, a := range []Access{
		AccessLocalWrite, AccessRemoteRead, AccessLocalWrite | AccessRemoteWrite, AccessDefault,
		AccessDefault | AccessRemoteAtomic, AccessDefault | verbs.AccessRelaxedOrder,
	} {
		m := toCacheAccess(a)
		assert.Equal(t, a, fromCacheAccess(m), "%#x", uint32(a))
		assert.NotZero(t, m&memcache.AccessRead, "local read is always granted")
		for _, b := range []Access{AccessLocalWrite, AccessRemoteRead, AccessRemoteWrite, AccessRemoteAtomic} {
			sup := toCacheAccess(a|b)&m == m
			assert.True(t, sup, "%#x|%#x serves %#x", uint32(a), uint32(b), uint32(a))
		}
	}
}

// TestMRCacheConcurrent hammers one cache from several goroutines (Gets,
// Puts, Invalidates on overlapping ranges; run with -race) and checks that
// every registration is deregistered exactly once by the end.
func TestMRCacheConcurrent(t *testing.T) {
	for _, cfg := range []MRCacheConfig{{}, {Merge: true}, {MaxRegions: 3}} {
		t.Run(fmt.Sprintf("merge=%v,max=%d", cfg.Merge, cfg.MaxRegions), func(t *testing.T) {
			c, f := newFakeCache(t, cfg)
			ps := uint64(os.Getpagesize())
			base := 0x40000 * ps
			const workers, iters = 8, 300
			errc := make(chan error, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range iters {
						addr := base + uint64((w*7+i*13)%16)*ps + uint64(i%5)
						n := uint64(1 + (i*977)%int(3*ps))
						if i%17 == 0 {
							c.Invalidate(addr, n)
							continue
						}
						r, err := c.Get(addr, n, AccessDefault)
						if err != nil {
							errc <- err
							return
						}
						if !r.Contains(addr, n) || r.LKey() == 0 {
							errc <- fmt.Errorf("Get(%#x, %d) returned [%#x, +%#x) key %d", addr, n, r.Addr(), r.Len(), r.LKey())
						}
						c.Put(r)
					}
					errc <- nil
				}()
			}
			for range workers {
				require.NoError(t, <-errc)
			}
			wg.Wait()
			st := c.Stats()
			assert.Zero(t, st.InUseRegions)
			require.NoError(t, c.Close())
			made, live := f.counts()
			assert.Zero(t, live, "MRs leaked after Close")
			assert.Positive(t, made)
			assert.Equal(t, uint64(made), c.Stats().Deregistrations)
		})
	}
}

// --- on a real RDMA device (Soft-RoCE in the VM) ---

// mrcDevice opens the test device ($GXFER_RDMA_DEVICE or the first one) and
// checks at cleanup that nothing created through internal/verbs remains. It
// skips without a device, or fails with GXFER_REQUIRE_RDMA=1 (like
// needDevice in helpers_test.go, which this internal test cannot reach).
func mrcDevice(t *testing.T) *Device {
	t.Helper()
	if err := Available(); err != nil {
		require.ErrorIs(t, err, ErrUnavailable)
		if os.Getenv("GXFER_REQUIRE_RDMA") == "1" {
			t.Fatalf("GXFER_REQUIRE_RDMA=1 but: %v", err)
		}
		t.Skipf("needs an RDMA device: %v", err)
	}
	base := verbs.Live()
	d, err := Open(os.Getenv("GXFER_RDMA_DEVICE"))
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, d.Close())
		assert.Equal(t, Counts{}, d.Counts())
		assert.Equal(t, base, verbs.Live(), "verbs objects left after Device.Close")
	})
	return d
}

func mrcBuffer(t *testing.T, n int) []byte {
	t.Helper()
	b, err := NewBuffer(n)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, b.Close()) })
	return b.Bytes()
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

// TestMRCacheDevice moves data through cached MRs on a loopback QP pair:
// repeated transfers on the same buffers register each once, the keys
// work, Invalidate deregisters, Close leaves no MR behind.
func TestMRCacheDevice(t *testing.T) {
	d := mrcDevice(t)
	pd, err := d.AllocPD()
	require.NoError(t, err)
	cq, err := d.NewCQ(CQConfig{})
	require.NoError(t, err)
	gid, _ := strconv.Atoi(os.Getenv("GXFER_RDMA_GID"))
	qcfg := QPConfig{SendCQ: cq, GIDIndex: gid}
	a, err := pd.NewQP(qcfg)
	require.NoError(t, err)
	b, err := pd.NewQP(qcfg)
	require.NoError(t, err)
	require.NoError(t, a.Connect(b.Endpoint()))
	require.NoError(t, b.Connect(a.Endpoint()))

	base := verbs.Live()
	c, err := NewMRCache(pd, MRCacheConfig{})
	require.NoError(t, err)
	assert.Same(t, pd, c.PD())

	const size = 1 << 20
	src, dst := mrcBuffer(t, size), mrcBuffer(t, size)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The first use of each buffer registers it whole.
	ws, err := c.GetBytes(src, 0)
	require.NoError(t, err)
	wd, err := c.GetBytes(dst, 0)
	require.NoError(t, err)
	c.Put(ws)
	c.Put(wd)
	require.Equal(t, uint64(2), c.Stats().Registrations)
	require.Equal(t, base.MRs+2, verbs.Live().MRs)
	require.Equal(t, 2, d.Counts().MRs)

	// Repeated transfers on the same buffers (anywhere inside) register
	// nothing more, and the cached keys move the data.
	for i := range 20 {
		off, n := uint64(i*4099%size/2), uint64(1+i*37001%(size/2))
		for j := range src[off : off+n] {
			src[off+uint64(j)] = byte(j*7 + i)
		}
		s, err := c.GetBytes(src[off:off+n], AccessLocalWrite)
		require.NoError(t, err)
		require.Same(t, ws.MR(), s.MR())
		t2, err := c.Get(addrOf(dst)+off, n, AccessLocalWrite|AccessRemoteWrite)
		require.NoError(t, err)
		require.Same(t, wd.MR(), t2.MR())
		_, err = a.Do(ctx, WR{Op: OpWrite, Local: []Seg{s.Seg(addrOf(src)+off, n)}, Remote: t2.Remote(addrOf(dst)+off, n).At(0)})
		require.NoError(t, err, "write %d", i)
		require.True(t, bytes.Equal(src[off:off+n], dst[off:off+n]), "write %d: data differs", i)

		clear(src[off : off+n])
		_, err = a.Do(ctx, WR{Op: OpRead, Local: []Seg{s.Seg(addrOf(src)+off, n)}, Remote: t2.Remote(addrOf(dst)+off, n).At(0)})
		require.NoError(t, err, "read %d", i)
		require.True(t, bytes.Equal(src[off:off+n], dst[off:off+n]), "read %d: data differs", i)
		c.Put(s)
		c.Put(t2)
	}
	st := c.Stats()
	assert.Equal(t, uint64(2), st.Registrations, "repeated transfers registered again")
	assert.Equal(t, 2, st.Regions)
	assert.Equal(t, uint64(40), st.HitsFast+st.HitsSlow)
	assert.Equal(t, base.MRs+2, verbs.Live().MRs)

	// The owner frees src: its MR goes now.
	live := verbs.Live().MRs
	c.Invalidate(addrOf(src), size)
	assert.Less(t, verbs.Live().MRs, live)

	// PD.Close refuses while the cache holds MRs; Close releases them all.
	assert.ErrorIs(t, pd.Close(), ErrBusy)
	require.NoError(t, c.Close())
	assert.Equal(t, base.MRs, verbs.Live().MRs, "MRs left after MRCache.Close")
	assert.Zero(t, d.Counts().MRs)
	_, err = c.GetBytes(src, 0)
	assert.ErrorIs(t, err, ErrClosed)

	require.NoError(t, a.Close())
	require.NoError(t, b.Close())
	require.NoError(t, cq.Close())
	require.NoError(t, pd.Close())
}

// TestMRCacheDeviceHeldAtClose: an MR referenced when the cache closes
// stays registered (and usable) until its Put.
func TestMRCacheDeviceHeldAtClose(t *testing.T) {
	d := mrcDevice(t)
	pd, err := d.AllocPD()
	require.NoError(t, err)
	c, err := NewMRCache(pd, MRCacheConfig{})
	require.NoError(t, err)
	buf := mrcBuffer(t, 3*os.Getpagesize())
	held, err := c.GetBytes(buf, 0)
	require.NoError(t, err)
	idle, err := c.GetBytes(buf[:1], AccessRemoteRead) // served by held's MR
	require.NoError(t, err)
	assert.Same(t, held.MR(), idle.MR())
	c.Put(idle)

	err = c.Close()
	require.ErrorIs(t, err, ErrBusy)
	assert.Equal(t, 1, d.Counts().MRs, "a referenced MR is not deregistered under its holder")
	assert.NotZero(t, held.MR().LKey())
	c.Put(held)
	assert.Zero(t, d.Counts().MRs, "deregistered at the last Put")
	require.NoError(t, pd.Close())
}

// TestMRCacheDeviceBadMemory: ibv_reg_mr of inaccessible memory fails, the
// failure is remembered, and nothing leaks.
func TestMRCacheDeviceBadMemory(t *testing.T) {
	d := mrcDevice(t)
	pd, err := d.AllocPD()
	require.NoError(t, err)
	c, err := NewMRCache(pd, MRCacheConfig{NegativeTTL: time.Hour})
	require.NoError(t, err)
	ps := os.Getpagesize()
	// Inaccessible memory (PROT_NONE) cannot be pinned.
	m, err := unix.Mmap(-1, 0, 4*ps, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, unix.Munmap(m)) })
	addr := addrOf(m)

	_, err = c.Get(addr, uint64(ps), 0)
	require.Error(t, err)
	var rerr *memcache.RegisterError
	require.ErrorAs(t, err, &rerr)
	var verr *verbs.Error
	assert.ErrorAs(t, err, &verr, "the verbs error is wrapped")
	t.Logf("registering PROT_NONE memory: %v", err)
	_, err = c.Get(addr, uint64(ps), 0)
	assert.ErrorIs(t, err, memcache.ErrRecentlyFailed)
	assert.Zero(t, d.Counts().MRs)
	require.NoError(t, c.Close())
	require.NoError(t, pd.Close())
}

// TestMRCacheDeviceClosedUnderneath: Device.Close deregisters cached MRs
// with everything else; closing the cache afterwards is harmless.
func TestMRCacheDeviceClosedUnderneath(t *testing.T) {
	d := mrcDevice(t)
	pd, err := d.AllocPD()
	require.NoError(t, err)
	c, err := NewMRCache(pd, MRCacheConfig{})
	require.NoError(t, err)
	buf := mrcBuffer(t, os.Getpagesize())
	r, err := c.GetBytes(buf, 0)
	require.NoError(t, err)
	c.Put(r)
	require.NoError(t, d.Close())
	assert.Zero(t, d.Counts().MRs)
	assert.NoError(t, c.Close())
	_, err = c.GetBytes(buf, 0)
	assert.ErrorIs(t, err, ErrClosed)
}
