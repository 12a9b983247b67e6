package soak

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
	"github.com/gxfer/gxfer/internal/testutil"
	"github.com/gxfer/gxfer/wire"
)

// TestMain runs the peer role when the test binary is re-executed as a
// soak peer, and the tests otherwise.
func TestMain(m *testing.M) {
	if IsPeer() {
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
