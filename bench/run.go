package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gxfer/gxfer/engine"
)

// Params are the knobs of a run, in the spirit of ucx_perftest and the
// perftest tools.
type Params struct {
	Sizes []int // message sizes in bytes

	// Iterations is the number of measured messages per size (ucx_perftest
	// -n). When it is 0, each size runs for Duration instead.
	Iterations int
	Duration   time.Duration

	Warmup int // messages run before measuring, per size (-w)
	Window int // outstanding submissions (-O); default 1
	Batch  int // messages per submission, sent as one engine batch (-b); default 1
	Count  int // times each (test, size) is measured; default 1

	// Clock selects what times operations (ClockAuto, the zero value:
	// the TSC where it is invariant, else the monotonic clock).
	Clock ClockMode

	// Progress, if set, is called as the run advances (at most every
	// ProgressEvery while a size is measured).
	Progress      func(Progress)
	ProgressEvery time.Duration // default 100 ms

	// OnResult, if set, is called with every result as soon as it is
	// measured and verified (to stream a table).
	OnResult func(Result)
}

// Progress says how far a run is.
type Progress struct {
	Done, Total int     // measurements finished and planned
	Test        string  // test being measured
	Size        int     // message size being measured
	Fraction    float64 // of the current measurement, 0..1
}

// Defaults for the zero Params fields.
const (
	DefaultDuration = 300 * time.Millisecond
	DefaultWarmup   = 10
)

// DefaultSizes are the sizes of a run without -s: 8 B to 16 MiB.
var DefaultSizes = []int{8, 4 << 10, 64 << 10, 1 << 20, 16 << 20}

func (p Params) withDefaults() Params {
	if len(p.Sizes) == 0 {
		p.Sizes = slices.Clone(DefaultSizes)
	}
	if p.Iterations == 0 && p.Duration == 0 {
		p.Duration = DefaultDuration
	}
	if p.Window == 0 {
		p.Window = 1
	}
	if p.Batch == 0 {
		p.Batch = 1
	}
	if p.Count == 0 {
		p.Count = 1
	}
	if p.ProgressEvery <= 0 {
		p.ProgressEvery = 100 * time.Millisecond
	}
	return p
}

// Validate reports the first bad parameter. Zero values mean defaults.
func (p Params) Validate() error {
	switch {
	case p.Iterations < 0:
		return fmt.Errorf("iterations must be positive, got %d", p.Iterations)
	case p.Duration < 0:
		return fmt.Errorf("duration must be positive, got %v", p.Duration)
	case p.Iterations > 0 && p.Duration > 0:
		return errors.New("iterations and duration are mutually exclusive")
	case p.Warmup < 0:
		return fmt.Errorf("warm-up must be 0 or more, got %d", p.Warmup)
	case p.Window < 0 || p.Window > 1<<16:
		return fmt.Errorf("window must be 1..65536, got %d", p.Window)
	case p.Batch < 0 || p.Batch > 1<<16:
		return fmt.Errorf("batch must be 1..65536, got %d", p.Batch)
	case p.Count < 0 || p.Count > 1000:
		return fmt.Errorf("count must be 1..1000, got %d", p.Count)
	}
	for _, s := range p.Sizes {
		if s <= 0 || s > MaxSize {
			return fmt.Errorf("size %d out of range 1..%d", s, MaxSize)
		}
	}
	return nil
}

// LatencyKind says what the latency columns measure.
type LatencyKind string

const (
	// RoundTrip: window 1 and batch 1, each sample is one copy's time from
	// submission to observed completion.
	RoundTrip LatencyKind = "round-trip"
	// PerOp: with several copies in flight (window or batch above 1), each
	// sample is the time per copy over the last window of completions (the
	// time they took divided by the copies they completed), as
	// ucx_perftest's bandwidth tests report time per operation. The
	// average is exactly wall time / copies.
	PerOp LatencyKind = "per-op"
	// OneWay: ping-pong tests (put_lat between host buffers); each sample
	// is half of one round trip, as ucx_perftest reports put_lat. The
	// bandwidth is then size / one-way latency and the message rate counts
	// both directions, as ucx_perftest's.
	OneWay LatencyKind = "one-way"
)

// Describe says what the latency columns of a kind mean.
func (k LatencyKind) Describe() string {
	switch k {
	case PerOp:
		return "latency: time per copy over the last window of completions (window or batch > 1; peer host bandwidth tests: over each run of back-to-back puts or gets between two clock reads), not a round trip"
	case OneWay:
		return "latency: one-way, half a ping-pong round trip (as ucx_perftest put_lat); MB/s = size / one-way latency"
	}
	return "latency: round trip of one copy (submit to complete)"
}

// LatencyStats summarises latency samples, in microseconds.
type LatencyStats struct {
	Median float64 `json:"median_us"`
	Avg    float64 `json:"avg_us"`
	P99    float64 `json:"p99_us"`
	Min    float64 `json:"min_us"`
	Max    float64 `json:"max_us"`
}

// Result is one measured (test, size) point.
type Result struct {
	Test       string `json:"test"`
	Transport  string `json:"transport"`
	Src        Mem    `json:"src"`
	Dst        Mem    `json:"dst"`
	Device     string `json:"device"`      // "gaudi0", or "host" for a host-only test
	DeviceName string `json:"device_name"` // device node, or "hlsim0 (emulated)"
	Model      string `json:"model,omitempty"`
	Emulated   bool   `json:"emulated"` // the device is the dma/hlsim emulator

	// Peer tests (transport ipc): the server, the memory types of the two
	// ends, and the server's device when its end is Gaudi memory.
	Peer           string `json:"peer,omitempty"` // "unix:/tmp/gx.sock (pid 123)"
	Local          Mem    `json:"local,omitempty"`
	Remote         Mem    `json:"remote,omitempty"`
	PeerDevice     string `json:"peer_device,omitempty"` // "gaudi0", or "host"
	PeerDeviceName string `json:"peer_device_name,omitempty"`
	PeerModel      string `json:"peer_model,omitempty"`
	PeerEmulated   bool   `json:"peer_emulated,omitempty"`

	Size        int   `json:"size"`
	Run         int   `json:"run"`        // repetition, 0..Count-1
	Iterations  int64 `json:"iterations"` // messages measured
	Submissions int64 `json:"submissions"`
	Warmup      int   `json:"warmup"`
	Window      int   `json:"window"`
	Batch       int   `json:"batch"`

	ElapsedSec  float64      `json:"elapsed_s"`
	LatencyKind LatencyKind  `json:"latency_kind"`
	Latency     LatencyStats `json:"latency"`
	// RoundTrip is always the submission round trip (submit to observed
	// completion of a whole submission), whatever LatencyKind is.
	RoundTrip LatencyStats `json:"round_trip"`
	// BandwidthMBs is bytes moved / wall time in MB/s with MB = 2^20 bytes.
	BandwidthMBs float64 `json:"bandwidth_mb_s"`
	MsgRate      float64 `json:"msg_rate"` // messages per second
	// Op says what one message (of MsgRate) includes, for peer tests: for
	// put_bw over ipc, one Put call that returns with the bytes in the
	// peer's memory. Empty where the workload does not say.
	Op       string `json:"op,omitempty"`
	Verified bool   `json:"verified"`
	// CPU is this process's CPU time over the measured run (getrusage:
	// every thread, the engine's included), per iteration and in cores;
	// nil where it could not be read.
	CPU *CPUUse `json:"cpu,omitempty"`
}

// BytesPerSec is the bandwidth in bytes per second.
func (r Result) BytesPerSec() float64 { return r.BandwidthMBs * (1 << 20) }

// Run measures every test at every size and returns the report: NewReport
// then Report.Run. Buffers are allocated once per (test, size) and reused
// by every iteration; the destination is verified after each measurement,
// and a verification failure ends the run with an error. On error the
// report holds what was measured before it.
func Run(ctx context.Context, env *Env, tests []Test, p Params) (*Report, error) {
	rep, err := NewReport(env, tests, p)
	if err != nil {
		return nil, err
	}
	return rep, rep.Run(ctx)
}

func (rep *Report) measure(ctx context.Context) error {
	tests, p := rep.run.tests, rep.run.p
	start := time.Now()
	defer func() { rep.ElapsedSec = time.Since(start).Seconds() }()
	total := len(tests) * len(p.Sizes) * p.Count
	done := 0
	for _, t := range tests {
		for _, size := range p.Sizes {
			for run := range p.Count {
				if err := ctx.Err(); err != nil {
					return err
				}
				if p.Progress != nil {
					p.Progress(Progress{Done: done, Total: total, Test: t.Name, Size: size})
				}
				res, err := measureOne(ctx, rep.run, t, size, run, func(f float64) {
					if p.Progress != nil {
						p.Progress(Progress{Done: done, Total: total, Test: t.Name, Size: size, Fraction: f})
					}
				})
				if err != nil {
					return fmt.Errorf("%s %s: %w", t.Name, FormatSize(size), err)
				}
				rep.Results = append(rep.Results, res)
				if p.OnResult != nil {
					p.OnResult(res)
				}
				done++
			}
		}
	}
	if p.Progress != nil {
		p.Progress(Progress{Done: total, Total: total, Fraction: 1})
	}
	return nil
}

func measureOne(ctx context.Context, rs *runState, t Test, size, run int, frac func(float64)) (res Result, err error) {
	env, p := rs.env, rs.p
	w, err := t.Prepare(ctx, env, size)
	if err != nil {
		return res, err
	}
	defer func() {
		if cerr := w.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("free buffers: %w", cerr)
		}
	}()
	if t.Latency {
		// Latency tests keep one operation in flight.
		p.Window, p.Batch = 1, 1
	}
	res = Result{
		Test: t.Name, Transport: t.Transport, Src: t.Src, Dst: t.Dst,
		Size: size, Run: run, Warmup: p.Warmup, Window: p.Window, Batch: p.Batch,
		LatencyKind: RoundTrip,
	}
	fillDevice(&res, env, t)
	rt, pingPong := w.(roundTripper)
	st, streamed := w.(streamer)
	streamed = streamed && !t.Latency && !pingPong && p.Batch == 1 && st.CanStream()
	switch {
	case pingPong:
		res.LatencyKind = OneWay
	case streamed || p.Window > 1 || p.Batch > 1:
		res.LatencyKind = PerOp
	}
	if d, ok := w.(opDescriber); ok {
		res.Op = d.OpMeaning(streamed)
	}
	run1 := func(limit int64, dur time.Duration, rec *recorder, frac func(float64)) (measured, error) {
		switch {
		case pingPong:
			return pingLoop(ctx, rt, p, limit, dur, rec, frac)
		case streamed:
			return streamLoop(ctx, st, p, size, limit, dur, rec, frac)
		}
		return loop(ctx, w, p, limit, dur, rec, frac)
	}
	if p.Warmup > 0 {
		if _, err := run1(int64(p.Warmup), 0, nil, nil); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
	}
	rec := rs.rec
	rec.kind = res.LatencyKind
	cpu0 := StartCPU()
	m, err := run1(int64(p.Iterations), p.Duration, rec, frac)
	if err != nil {
		return res, err
	}
	res.CPU = cpu0.Use(m.msgs, m.elapsed)
	if err := w.Verify(ctx); err != nil {
		return res, err
	}
	res.Verified = true
	res.Iterations, res.Submissions = m.msgs, m.subs
	res.ElapsedSec = m.elapsed.Seconds()
	res.Latency = rec.lat.stats()
	res.RoundTrip = rec.rttStats(res.Latency)
	if res.LatencyKind == PerOp && m.msgs > 0 {
		// The average time per copy is exactly wall time / copies.
		res.Latency.Avg = m.elapsed.Seconds() * 1e6 / float64(m.msgs)
	}
	if m.elapsed > 0 {
		msgs := float64(m.msgs)
		if res.LatencyKind == OneWay {
			msgs *= 2 // a round trip is two messages, one each way
		}
		res.BandwidthMBs = msgs * float64(size) / m.elapsed.Seconds() / (1 << 20)
		res.MsgRate = msgs / m.elapsed.Seconds()
	}
	return res, nil
}

func fillDevice(res *Result, env *Env, t Test) {
	if t.Peer != NoPeer && env.Peer != nil {
		res.Peer, res.Local, res.Remote = env.Peer.String(), t.LocalMem(), t.RemoteMem()
		res.PeerDevice = "host"
		if t.NeedsPeerDevice() {
			res.PeerDevice = fmt.Sprintf("gaudi%d", env.Peer.Device)
			if d, ok := env.Peer.DeviceInfo(); ok {
				res.PeerDeviceName, res.PeerModel, res.PeerEmulated = d.Name, d.Model, d.Emulated
			}
		}
	}
	if !t.NeedsDevice() {
		res.Device, res.DeviceName = "host", "host memory only"
		return
	}
	res.Device = fmt.Sprintf("gaudi%d", env.Device)
	for _, d := range env.Engine.Devices() {
		if d.Index == env.Device {
			res.DeviceName, res.Model, res.Emulated = d.Name, d.Model, d.Emulated
		}
	}
}

type measured struct {
	msgs, subs int64
	elapsed    time.Duration
}

type pending struct {
	f  *engine.Future
	t0 int64 // clock ticks
	n  int
}

// loop runs limit messages (or, when limit is 0, submits for dur), with
// up to p.Window submissions of p.Batch messages in flight, and records
// latencies into rec (nil: not recorded).
func loop(ctx context.Context, w Workload, p Params, limit int64, dur time.Duration, rec *recorder, frac func(float64)) (m measured, err error) {
	ring := make([]pending, p.Window)
	head, n := 0, 0
	defer func() {
		// Every submission must end before the buffers can be reused or
		// freed: wait for what is still in flight, even on error.
		for ; n > 0; n-- {
			_ = ring[head].f.Wait(context.Background())
			head = (head + 1) % len(ring)
		}
	}()
	c, err := clockFor(p.Clock)
	if err != nil {
		return m, err
	}
	var submitted int64
	durT, everyT := c.ticks(dur), c.ticks(p.ProgressEvery)
	start := c.now()
	now, lastProgress := start, start
	if rec != nil {
		rec.begin(c, start, p.Window)
	}
	// more says whether to submit again at t: a timed run looks at the
	// time of each submission, not of the last completion only (the
	// first fill of a window of -O x -b messages would ignore -time).
	more := func(t int64) bool {
		if limit > 0 {
			return submitted < limit
		}
		return submitted == 0 || t-start < durT
	}
	for {
		for n < len(ring) {
			t0 := c.now()
			if !more(t0) {
				break
			}
			k := p.Batch
			if limit > 0 && limit-submitted < int64(k) {
				k = int(limit - submitted)
			}
			f := w.Submit(ctx, k)
			ring[(head+n)%len(ring)] = pending{f: f, t0: t0, n: k}
			n++
			submitted += int64(k)
			m.subs++
		}
		if n == 0 {
			break
		}
		it := &ring[head]
		if err := it.f.Wait(ctx); err != nil {
			return m, err
		}
		head, n = (head+1)%len(ring), n-1
		now = c.now()
		if rec != nil {
			rec.add(it.t0, now, it.n)
		}
		m.msgs += int64(it.n)
		if frac != nil && now-lastProgress >= everyT {
			lastProgress = now
			if limit > 0 {
				frac(float64(m.msgs) / float64(limit))
			} else {
				frac(min(1, float64(now-start)/float64(durT)))
			}
		}
	}
	m.elapsed = c.dur(now - start)
	return m, nil
}

// streamer is a workload whose operations complete in the caller (Puts
// or Gets through an engine Binding): a bandwidth test runs them back to
// back with Stream, as ucx_perftest's put_bw posts its puts, with no
// future and no clock read per operation.
type streamer interface {
	// CanStream reports whether Stream can run this workload's operations.
	CanStream() bool
	// Stream runs n operations and returns when all are done.
	Stream(ctx context.Context, n int) error
}

// flusher is a streamer whose Stream may return with operations still in
// flight (an RDMA binding's posted writes): Flush waits for them, and the
// measurement ends after it.
type flusher interface {
	Flush() error
}

// streamChunk is how many operations of size bytes streamLoop runs
// between two clock reads: about 1 MiB of data, at most 1024 operations
// (some microseconds), so that the clock and the recorder weigh nothing
// up to 512 KiB (at 256 KiB, one operation per read spent 3.4% of a
// put_bw run's CPU in the recorder) and a timed run overshoots its
// duration by little.
func streamChunk(size int) int {
	return max(1, min(1024, (1<<20)/max(size, 1)))
}

// chunker is a streamer that runs more operations per Stream call than
// streamChunk says (see rmaWork.StreamChunk).
type chunker interface {
	StreamChunk(size int) int
}

// chunkFor is the operations per Stream call of w at size bytes.
func chunkFor(w streamer, size int) int {
	if c, ok := w.(chunker); ok {
		return max(1, c.StreamChunk(size))
	}
	return streamChunk(size)
}

// streamLoop runs limit operations of w (or, when limit is 0, operations
// for dur) in chunks of chunkFor(w, size), reading the clock once per
// chunk. Each latency sample is the time per operation over one chunk,
// everything included (the clock and the recorder of the previous chunk
// too): the samples' weighted mean is exactly wall time / operations.
func streamLoop(ctx context.Context, w streamer, p Params, size int, limit int64, dur time.Duration, rec *recorder, frac func(float64)) (m measured, err error) {
	c, err := clockFor(p.Clock)
	if err != nil {
		return m, err
	}
	k := int64(chunkFor(w, size))
	durT, everyT := c.ticks(dur), c.ticks(p.ProgressEvery)
	start := c.now()
	now, lastProgress := start, start
	if rec != nil {
		rec.begin(c, start, 1)
	}
	for (limit > 0 && m.msgs < limit) || (limit == 0 && (m.msgs == 0 || now-start < durT)) {
		if err := ctx.Err(); err != nil {
			return m, err
		}
		n := k
		if limit > 0 {
			n = min(n, limit-m.msgs)
		}
		t0 := now
		if err := w.Stream(ctx, int(n)); err != nil {
			return m, err
		}
		now = c.now()
		if rec != nil {
			rec.add(t0, now, int(n))
		}
		m.msgs += n
		m.subs++
		if frac != nil && now-lastProgress >= everyT {
			lastProgress = now
			if limit > 0 {
				frac(float64(m.msgs) / float64(limit))
			} else {
				frac(min(1, float64(now-start)/float64(durT)))
			}
		}
	}
	if f, ok := w.(flusher); ok {
		if err := f.Flush(); err != nil {
			return m, err
		}
		now = c.now()
	}
	m.elapsed = c.dur(now - start)
	return m, nil
}

// opDescriber is a workload that says what one of its messages includes
// (Result.Op); streamed: its operations run through streamLoop.
type opDescriber interface {
	OpMeaning(streamed bool) string
}

// roundTripper is a workload the runner times round by round (ping-pong):
// Send starts a round (its message is on its way), Await returns when its
// answer has arrived.
type roundTripper interface {
	Send(ctx context.Context) error
	Await(ctx context.Context) error
}

// pingLoop runs limit rounds (or, when limit is 0, rounds for dur) and
// reads the clock once per round, right after the round's Send, as
// ucx_perftest's ucx_perf_update follows its send_b: the clock read and
// the bookkeeping overlap the message's flight instead of delaying the
// next round's message. A round's sample runs from its Send to the next
// one's (the last: to its answer), so the samples tile the measurement,
// which starts at the first Send.
func pingLoop(ctx context.Context, w roundTripper, p Params, limit int64, dur time.Duration, rec *recorder, frac func(float64)) (m measured, err error) {
	c, err := clockFor(p.Clock)
	if err != nil {
		return m, err
	}
	durT, everyT := c.ticks(dur), c.ticks(p.ProgressEvery)
	var start, now, lastProgress int64
	for (limit > 0 && m.msgs < limit) || (limit == 0 && (m.msgs == 0 || now-start < durT)) {
		if m.msgs&1023 == 1023 {
			if err := ctx.Err(); err != nil {
				return m, err
			}
		}
		if err := w.Send(ctx); err != nil {
			return m, err
		}
		t := c.now()
		if m.msgs == 0 {
			start, lastProgress = t, t
			if rec != nil {
				rec.begin(c, start, 1)
			}
		} else if rec != nil {
			rec.add(now, t, 1) // the previous round
		}
		now = t
		if err := w.Await(ctx); err != nil {
			return m, err
		}
		m.msgs++
		if frac != nil && now-lastProgress >= everyT {
			lastProgress = now
			if limit > 0 {
				frac(float64(m.msgs) / float64(limit))
			} else {
				frac(min(1, float64(now-start)/float64(durT)))
			}
		}
	}
	if m.msgs > 0 {
		end := c.now()
		if rec != nil {
			rec.add(now, end, 1) // the last round
		}
		now = end
	}
	m.subs = m.msgs
	m.elapsed = c.dur(now - start)
	return m, nil
}

// recorder keeps the latency samples of one measurement.
type recorder struct {
	kind LatencyKind
	lat  samples // what the latency columns show
	rtt  samples // submission round trips
	c    *clock

	// Per-op time: completion times (clock ticks) and cumulative copies of
	// the last window completions.
	start int64
	times []int64
	cum   []int64
	k     int
	total int64
}

// begin empties the recorder for a measurement starting at start (clock
// ticks) with window submissions in flight, keeping its memory. kind is
// set before.
func (r *recorder) begin(c *clock, start int64, window int) {
	r.c, r.start, r.k, r.total = c, start, 0, 0
	r.lat.reset()
	r.rtt.reset()
	if cap(r.times) < window {
		r.times, r.cum = make([]int64, window), make([]int64, window)
	}
	r.times, r.cum = r.times[:window], r.cum[:window]
}

// add records a submission of n copies, submitted at t0 and seen complete
// at now (clock ticks). Per-op samples span the last window completions:
// with a full window, completions are observed in bursts, and the time
// between two of them says nothing; the time a whole window took, per
// copy, does.
func (r *recorder) add(t0, now int64, n int) {
	rtt := r.c.dur(now - t0)
	switch r.kind {
	case RoundTrip:
		r.lat.add(rtt, 1) // the round trips are the latency samples: see rttStats
		return
	case OneWay:
		r.lat.add(rtt/2, 1)
		return
	}
	r.rtt.add(rtt, 1)
	r.total += int64(n)
	i := r.k % len(r.times)
	baseT, baseCum := r.start, int64(0)
	if r.k >= len(r.times) {
		baseT, baseCum = r.times[i], r.cum[i]
	}
	r.lat.add(r.c.dur(now-baseT)/time.Duration(r.total-baseCum), n)
	r.times[i], r.cum[i] = now, r.total
	r.k++
}

// rttStats summarises the submission round trips. Round-trip and one-way
// measurements keep one set of samples, the latency's, to halve the
// recording work per operation.
func (r *recorder) rttStats(lat LatencyStats) LatencyStats {
	switch r.kind {
	case RoundTrip:
		return lat
	case OneWay:
		return LatencyStats{Median: 2 * lat.Median, Avg: 2 * lat.Avg, P99: 2 * lat.P99, Min: 2 * lat.Min, Max: 2 * lat.Max}
	}
	return r.rtt.stats()
}

// maxSamples bounds the memory of a measurement: beyond it, samples are
// kept by reservoir sampling (uniformly), so quantiles stay unbiased.
const maxSamples = 1 << 17

// samples holds latency samples; the mean and extremes are exact, the
// quantiles come from at most maxSamples uniformly kept samples.
type samples struct {
	v        []time.Duration
	seen     int64
	sum      float64 // weighted sum, ns
	weight   int64
	min, max time.Duration
	rng      *rand.Rand
}

func (s *samples) reset() {
	*s = samples{v: s.v[:0], rng: s.rng}
}

func (s *samples) add(d time.Duration, weight int) {
	if s.seen == 0 || d < s.min {
		s.min = d
	}
	if d > s.max {
		s.max = d
	}
	s.sum += float64(d) * float64(weight)
	s.weight += int64(weight)
	s.seen++
	if len(s.v) < maxSamples {
		s.v = append(s.v, d)
		return
	}
	if s.rng == nil {
		s.rng = rand.New(rand.NewPCG(1, 2))
	}
	if j := s.rng.Int64N(s.seen); j < maxSamples {
		s.v[j] = d
	}
}

func (s *samples) stats() LatencyStats {
	if s.seen == 0 {
		return LatencyStats{}
	}
	slices.Sort(s.v)
	us := func(d float64) float64 { return d / 1e3 }
	return LatencyStats{
		Median: us(quantile(s.v, 0.50)),
		Avg:    us(s.sum / float64(s.weight)),
		P99:    us(quantile(s.v, 0.99)),
		Min:    us(float64(s.min)),
		Max:    us(float64(s.max)),
	}
}

// quantile interpolates linearly between the closest ranks of sorted v.
func quantile(v []time.Duration, q float64) float64 {
	if len(v) == 0 {
		return 0
	}
	pos := q * float64(len(v)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(v)-1)
	f := pos - float64(lo)
	return float64(v[lo])*(1-f) + float64(v[hi])*f
}
