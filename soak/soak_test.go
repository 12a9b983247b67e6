package soak

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/internal/testutil"
	"github.com/gxfer/gxfer/wire"
)

// TestMain runs the peer role when the test binary is re-executed as a
// soak peer, and the tests otherwise.
func TestMain(m *testing.M) {
	if IsPeer() {
		if s := os.Getenv(testPeerStderr); s != "" {
			fmt.Fprintln(os.Stderr, s)
		}
		os.Exit(PeerMain(os.Stdin, os.Stdout))
	}
	testutil.Main(m)
}

func testPeerCommand() *exec.Cmd {
	return exec.Command(os.Args[0], "-test.run=^$")
}

// TestSoakShort is the CI form of the soak: two peer processes, every
// fault kind, about 20 s of load (8 s with -short). GXFER_SOAK_DURATION,
// GXFER_SOAK_SEED and GXFER_SOAK_FAULTS (a list, as gxfer soak -faults)
// override.
func TestSoakShort(t *testing.T) {
	d := 20 * time.Second
	if testing.Short() {
		d = 8 * time.Second
	}
	if s := os.Getenv("GXFER_SOAK_DURATION"); s != "" {
		var err error
		d, err = time.ParseDuration(s)
		require.NoError(t, err)
	}
	seed := time.Now().UnixNano() & (1<<53 - 1)
	if s := os.Getenv("GXFER_SOAK_SEED"); s != "" {
		_, err := fmt.Sscan(s, &seed)
		require.NoError(t, err)
	}
	faults, err := ParseFaults(os.Getenv("GXFER_SOAK_FAULTS"))
	require.NoError(t, err)
	rep, err := Run(context.Background(), Config{
		Faults:      faults,
		Duration:    d,
		Seed:        seed,
		Procs:       2,
		Workers:     3,
		MaxOp:       64 << 10,
		FaultEvery:  300 * time.Millisecond,
		PeerCommand: testPeerCommand,
		Progress:    func(s string) { t.Log(s) },
	})
	require.NoError(t, err)
	var buf bytes.Buffer
	rep.Write(&buf)
	t.Log("\n" + buf.String())
	require.True(t, rep.OK(), "the soak found problems (rerun with GXFER_SOAK_SEED=%d):\n%s", seed, buf.String())
	var ok uint64
	for _, c := range rep.Ops {
		ok += c.OK
	}
	require.NotZero(t, ok, "no operation succeeded")
	require.NotZero(t, rep.BytesVerified)
}

func TestPattern(t *testing.T) {
	for _, tc := range []struct {
		name     string
		pos, n   int
		flip     int // byte to change before checking (-1: none)
		wantFail int
	}{
		{"aligned", 0, 64, -1, -1},
		{"unaligned start", 3, 61, -1, -1},
		{"one byte", 7, 1, -1, -1},
		{"empty", 5, 0, -1, -1},
		{"flip first", 5, 40, 0, 0},
		{"flip middle word", 0, 64, 17, 17},
		{"flip tail", 1, 20, 19, 19},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := make([]byte, tc.n)
			fill(b, 42, tc.pos)
			if tc.flip >= 0 {
				b[tc.flip] ^= 0x10
			}
			require.Equal(t, tc.wantFail, check(b, 42, tc.pos))
			if tc.n > 0 && tc.flip < 0 {
				require.NotEqual(t, -1, check(b, 43, tc.pos), "another seed's pattern differs")
			}
		})
	}
	// A window of a longer pattern checks at its position.
	b := make([]byte, 100)
	fill(b, 9, 1000)
	require.Equal(t, -1, check(b[13:57], 9, 1013))
	require.Equal(t, 3, findWord(9, word(9, 3), 10))
	require.Equal(t, -1, nonZero(make([]byte, 33)))
	z := make([]byte, 33)
	z[32] = 1
	require.Equal(t, 32, nonZero(z))
}

func TestParseFaults(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []Fault
		wantErr string
	}{
		{"", AllFaults, ""},
		{"all", AllFaults, ""},
		{"none", []Fault{}, ""},
		{"cs-hang, peer-kill,cs-hang", []Fault{FaultCSHang, FaultPeerKill}, ""},
		{"bogus", nil, "unknown fault"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseFaults(tc.in)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("wrapped: %w", engine.ErrPeer), "ErrPeer"},
		{fmt.Errorf("x: %w", errors.Join(engine.ErrPeer, engine.ErrTimeout)), "ErrTimeout"},
		{engine.ErrClosed, "ErrClosed"},
		{errors.New("plain"), "untyped"},
		{context.DeadlineExceeded, "context"},
		{fmt.Errorf("gaudi0: %w", engine.ErrDeviceLost), "ErrDeviceLost"},
		{fmt.Errorf("alloc: %w", engine.ErrNoMemory), "ErrNoMemory"},
		{fmt.Errorf("peer: %w: %w", engine.ErrPeer, wire.NewError(3, wire.StatusInternal, "copy: "+engine.ErrDeviceLost.Error()+": gaudi0")), classPeerDeviceLost},
		{fmt.Errorf("peer: %w: %w", engine.ErrPeer, wire.NewError(3, wire.StatusInternal, "something else")), "ErrPeer"},
		{fmt.Errorf("peer: %w: %w", engine.ErrPeer, wire.NewError(3, wire.StatusNoResources, engine.ErrDeviceLost.Error())), "ErrPeer"},
	} {
		require.Equal(t, tc.want, classify(tc.err), tc.err.Error())
	}
	stale := fmt.Errorf("peer: %w: %w", engine.ErrInvalid, wire.NewError(3, wire.StatusStale, "buffer no longer exported"))
	require.True(t, staleRefusal(stale))
	require.False(t, staleRefusal(fmt.Errorf("peer: %w: %w", engine.ErrInvalid, wire.NewError(3, wire.StatusOutOfRange, "x"))))
	require.False(t, staleRefusal(fmt.Errorf("peer: %w: %w", engine.ErrPeer, wire.NewError(3, wire.StatusStale, "x"))))
}

func TestTargetExplains(t *testing.T) {
	var tg target
	t0 := time.Now()
	require.False(t, tg.explains(t0, t0.Add(time.Second)), "no fault yet")
	iv := tg.begin(FaultPeerKill)
	require.True(t, tg.explains(t0, time.Now()), "an open interval explains what overlaps it")
	iv.end(time.Now().Add(50 * time.Millisecond))
	require.True(t, tg.explains(time.Now(), time.Now()))
	time.Sleep(60 * time.Millisecond)
	require.False(t, tg.explains(time.Now(), time.Now().Add(time.Second)), "ended before the operation started")
	require.True(t, tg.explains(t0.Add(-time.Hour), time.Now()))
	var none *target
	require.False(t, none.explains(t0, t0))
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"procs", Config{Procs: 17}, "procs"},
		{"no command", Config{Procs: 1}, "PeerCommand"},
		{"netns", Config{Netns: "maybe"}, "netns"},
		{"max op", Config{MaxOp: 8 << 20}, "max op"},
		// Each worker has slots in every peer's read-write Gaudi buffer,
		// which the peer's emulated device must hold.
		{"unknown fault", Config{Faults: []Fault{FaultCSHang, "cs-hnag"}, Duration: time.Second}, `unknown fault "cs-hnag"`},
		{"workers beyond the peers' device memory", Config{Procs: 1, Workers: 48, PeerCommand: testPeerCommand, Faults: []Fault{}, Duration: time.Second}, "workers 48"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(context.Background(), tc.cfg)
			require.ErrorContains(t, err, tc.want)
			require.True(t, strings.HasPrefix(err.Error(), "soak:"))
		})
	}
}

func TestResultRules(t *testing.T) {
	faulted := &target{name: "faulted"}
	faulted.begin(FaultPeerKill) // open: explains everything from now on
	quiet := &target{name: "quiet"}
	localG0 := &target{name: "gaudi0", dev: localDev}
	localG0.begin(FaultCSReset)
	peerG0 := &target{name: "peer 0 gaudi0", dev: peerDev}
	peerG0.begin(FaultCSHang)
	quietG1 := &target{name: "gaudi1", dev: localDev}
	lost := fmt.Errorf("gaudi0: %w", engine.ErrDeviceLost)
	peerLost := fmt.Errorf("peer: %w: %w", engine.ErrPeer, wire.NewError(3, wire.StatusInternal, engine.ErrDeviceLost.Error()))
	for _, tc := range []struct {
		name    string
		err     error
		targets []*target
		want    string // violation kind, "" for none
	}{
		{"success", nil, nil, ""},
		{"typed and explained", fmt.Errorf("x: %w", engine.ErrPeer), []*target{quiet, faulted}, ""},
		{"typed, nothing injected", fmt.Errorf("x: %w", engine.ErrPeer), []*target{quiet}, "unexplained"},
		{"untyped", errors.New("boom"), []*target{faulted}, "bad-error"},
		{"panic", engine.ErrPanic, []*target{faulted}, "bad-error"},
		{"invalid on a valid op", engine.ErrInvalid, []*target{faulted}, "bad-error"},
		{"device lost in its device's window", lost, []*target{quiet, localG0}, ""},
		{"device lost, another device's window", lost, []*target{faulted, quietG1}, "unexplained"},
		{"device lost, only another fault", lost, []*target{faulted}, "unexplained"},
		{"device lost, a peer's device window", lost, []*target{peerG0}, "unexplained"},
		{"aborted in a device's window", fmt.Errorf("x: %w", engine.ErrAborted), []*target{localG0}, ""},
		{"peer device lost in its window", peerLost, []*target{quiet, peerG0}, ""},
		{"peer device lost, only a peer fault", peerLost, []*target{faulted}, "unexplained"},
		{"peer device lost, a local device window", peerLost, []*target{localG0}, "unexplained"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &driver{t: newTally()}
			d.result("op", tc.err, time.Now(), func() string { return "what" }, tc.targets...)
			if tc.want == "" {
				require.Empty(t, d.t.violations)
				return
			}
			require.Len(t, d.t.violations, 1)
			require.True(t, strings.HasPrefix(d.t.violations[0], tc.want+":"), d.t.violations[0])
		})
	}
}

// fakeFuture resolves (successfully) when closed.
type fakeFuture chan struct{}

func (f fakeFuture) Done() <-chan struct{} { return f }
func (f fakeFuture) Err() error            { return nil }

func TestWaitBound(t *testing.T) {
	d := &driver{t: newTally(), cfg: Config{Bound: 20 * time.Millisecond}}
	f := fakeFuture(make(chan struct{}))
	require.ErrorIs(t, d.wait(f, func() string { return "never" }), errUnresolved)
	require.Len(t, d.t.violations, 1)
	require.Contains(t, d.t.violations[0], "unresolved: never")
	close(f)
	require.NoError(t, d.wait(f, func() string { return "done" }))
}

func TestStaleResult(t *testing.T) {
	d := &driver{t: newTally(), cfg: Config{Seed: 1}}
	d.staleResult("Put", fmt.Errorf("x: %w", engine.ErrInvalid), func() string { return "w" })
	d.staleResult("Get", fmt.Errorf("x: %w", engine.ErrPeer), func() string { return "w" })
	require.Empty(t, d.t.violations, "a stale key's refusal is what must happen")
	d.staleResult("Put", nil, func() string { return "w" })
	require.Len(t, d.t.violations, 1)
	require.Contains(t, d.t.violations[0], "stale-success")
}

// TestPeerDeviceLostErrors: what an initiator gets from an owner whose
// device was reset under the buffer a key names (classPeerDeviceLost),
// and once the owner freed that lost buffer and exported a new one (a
// stale refusal, which remoteResult explains as a superseded key); the
// new key works. Over both transports.
func TestPeerDeviceLostErrors(t *testing.T) {
	for _, tr := range []string{"unix", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			owner, err := engine.New(engineConfig(1, zerolog.Nop()))
			require.NoError(t, err)
			defer owner.Close()
			init, err := engine.New(engineConfig(1, zerolog.Nop()))
			require.NoError(t, err)
			defer init.Close()
			addr := filepath.Join(t.TempDir(), "owner.sock")
			if tr == "tcp" {
				addr = "127.0.0.1:0"
			}
			l, err := owner.Listen(tr, addr)
			require.NoError(t, err)
			defer l.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ep, err := init.Dial(ctx, tr, l.Addr())
			require.NoError(t, err)
			defer ep.Close()

			const n = 64 << 10
			h, err := init.Alloc(n, engine.Host)
			require.NoError(t, err)
			old, err := owner.Alloc(n, engine.Gaudi(0))
			require.NoError(t, err)
			k, err := old.Export()
			require.NoError(t, err)
			fill(h.Bytes(), 7, 0)
			require.NoError(t, ep.Put(ctx, h.All(), k).Wait(ctx))

			m, err := owner.Emulator(0)
			require.NoError(t, err)
			m.Reset()
			// The engine learns of the reset from the driver's event, a
			// little later: WaitDevice waits only once it has.
			require.Eventually(t, func() bool { return owner.Devices()[0].Resets >= 1 }, 10*time.Second, time.Millisecond)
			require.NoError(t, owner.WaitDevice(ctx, 0))
			err = ep.Get(ctx, h.All(), k).Wait(ctx)
			require.Error(t, err)
			require.Equal(t, classPeerDeviceLost, classify(err), "%v", err)
			require.False(t, staleRefusal(err))

			require.NoError(t, old.Free(), "a lost buffer frees")
			err = ep.Put(ctx, h.All(), k).Wait(ctx)
			require.True(t, staleRefusal(err), "%v", err)
			require.Equal(t, "ErrInvalid", classify(err))

			nb, err := owner.Alloc(n, engine.Gaudi(0))
			require.NoError(t, err)
			defer nb.Free()
			nk, err := nb.Export()
			require.NoError(t, err)
			fill(h.Bytes(), 7, 0) // a failed Get's destination is undefined (over TCP it is zeroed)
			require.NoError(t, ep.Put(ctx, h.All(), nk).Wait(ctx))
			clear(h.Bytes())
			require.NoError(t, ep.Get(ctx, h.All(), nk).Wait(ctx))
			require.Equal(t, -1, check(h.Bytes(), 7, 0))
		})
	}
}

// TestRemoteResultSuperseded: a stale refusal of a peer's device key is
// explained only when a newer key of that device replaced it and the
// device's CS fault window covers the operation.
func TestRemoteResultSuperseded(t *testing.T) {
	stale := fmt.Errorf("peer: %w: %w", engine.ErrInvalid, wire.NewError(3, wire.StatusStale, "buffer no longer exported"))
	newPeer := func(kgen int, window bool) (*driver, *peerProc) {
		d := &driver{t: newTally(), self: &target{name: "self"}}
		p := &peerProc{d: d, faults: &target{name: "peer"}}
		for i := range p.dev {
			p.dev[i] = &target{name: "peer gaudi", dev: peerDev}
		}
		if window {
			p.dev[0].begin(FaultCSReset)
		}
		p.view = peerView{gen: 2, alive: true, kgen: [2]int{kgen, 0}}
		return d, p
	}
	old := peerView{gen: 2, alive: true}
	what := func() string { return "w" }
	for _, tc := range []struct {
		name   string
		kgen   int
		window bool
		err    error
		rdev   int
		want   string
	}{
		{"superseded in the window", 1, true, stale, 0, ""},
		{"superseded, no window", 1, false, stale, 0, "unexplained"},
		{"not superseded", 0, true, stale, 0, "bad-error"},
		{"host key", 1, true, stale, -1, "bad-error"},
		{"another device's key", 1, true, stale, 1, "bad-error"},
		{"another invalid", 1, true, fmt.Errorf("x: %w", engine.ErrInvalid), 0, "bad-error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, p := newPeer(tc.kgen, tc.window)
			d.remoteResult("get", tc.err, time.Now(), what, p, old, tc.rdev, d.remoteTargets(p, tc.rdev)...)
			if tc.want == "" {
				require.Empty(t, d.t.violations)
				require.EqualValues(t, 1, d.t.ops["get"].Failed[classSuperseded])
				return
			}
			require.Len(t, d.t.violations, 1)
			require.True(t, strings.HasPrefix(d.t.violations[0], tc.want+":"), d.t.violations[0])
		})
	}
	d, p := newPeer(1, true)
	p.view.gen = 3 // the peer was started again: its old keys are refused for that
	d.remoteResult("get", stale, time.Now(), what, p, old, 0, d.remoteTargets(p, 0)...)
	require.Len(t, d.t.violations, 1)
}

// TestRenewCountsOnce: a device buffer's replacement that fails to
// allocate is counted once as a failed recover/alloc (and judged, here a
// violation: no fault explains it).
func TestRenewCountsOnce(t *testing.T) {
	e, err := engine.New(engineConfig(2, zerolog.Nop()))
	require.NoError(t, err)
	defer e.Close()
	d := &driver{cfg: Config{Bound: 5 * time.Second}, t: newTally(), e: e}
	for i := range d.selfDev {
		d.selfDev[i] = &target{name: fmt.Sprintf("gaudi%d", i), dev: localDev}
	}
	db := &devBuf{dev: 0, size: 1 << 40, lost: true} // more than the device holds
	require.False(t, d.renew(db, "test"))
	c := d.t.ops["recover/alloc"]
	require.NotNil(t, c)
	var failed uint64
	for _, n := range c.Failed {
		failed += n
	}
	require.Zero(t, c.OK)
	require.Equal(t, uint64(1), failed, "one allocation failed: %v", c.Failed)
	require.NotEmpty(t, d.t.violations)
}

// TestReportPassClaimsWhatWasChecked: the PASS line states how much was
// read back, not that every success was verified: some successes are
// not read back (a stale key's valid Put, the copies around a timed-out
// one), and a run stopped at once verifies nothing.
func TestReportPassClaimsWhatWasChecked(t *testing.T) {
	for _, tc := range []struct {
		verified uint64
		want     string
	}{
		{0, "result: PASS (0.0 MiB of successes read back with no wrong byte"},
		{3 << 20, "result: PASS (3.0 MiB of successes read back with no wrong byte"},
	} {
		r := &Report{Ops: map[string]*OpCounts{"stale/valid-put": {OK: 2}}, BytesVerified: tc.verified,
			Injected: map[Fault]int{FaultCSHang: 3, FaultPeerKill: 1}}
		var out strings.Builder
		r.Write(&out)
		require.Contains(t, out.String(), tc.want)
		require.NotContains(t, out.String(), "every success verified")
		// A CS hang is armed, not known to have hit a CS.
		require.Contains(t, out.String(), "cs-hang      3 (armed for the next CS, cleared after 300 ms)")
		require.Contains(t, out.String(), "peer-kill    1\n")
	}
}

// TestTimeoutResultCountsOnce: the copy given a short Timeout is counted
// once whatever it ends with; a failure other than ErrTimeout was counted
// under timeout/d2d and again under timeout/d2d-other.
func TestTimeoutResultCountsOnce(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"ok", nil},
		{"timeout", fmt.Errorf("copy: %w", engine.ErrTimeout)},
		{"other", fmt.Errorf("copy: %w", engine.ErrDevice)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &driver{t: newTally()}
			d.timeoutResult(tc.err, time.Now(), func() string { return "test copy" })
			var n uint64
			for kind, c := range d.t.ops {
				n += c.OK
				for _, v := range c.Failed {
					n += v
				}
				require.Equal(t, "timeout/d2d", kind)
			}
			require.Equal(t, uint64(1), n)
		})
	}
}
