package staging

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

const chunk = 4096

// network is the far side of a pipeline's transfers: Out writes into
// remote, In reads from it; each chunk is moved on a goroutine after a
// random delay, and what runs is counted.
type network struct {
	mu     sync.Mutex
	remote []byte
	active atomic.Int32
	calls  []int // chunk indices, in the order started
	onCall func(i int) error
	wg     sync.WaitGroup
}

func (n *network) net(out bool) Net {
	return func(i int, off uint64, host datapath.Mem) (func() error, error) {
		n.mu.Lock()
		n.calls = append(n.calls, i)
		n.mu.Unlock()
		if n.onCall != nil {
			if err := n.onCall(i); err != nil {
				return nil, err
			}
		}
		ch := make(chan struct{})
		n.active.Add(1)
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			time.Sleep(time.Duration(rand.IntN(200)) * time.Microsecond)
			if out {
				copy(n.remote[off:off+host.Len], host.Host())
			} else {
				copy(host.Host(), n.remote[off:off+host.Len])
			}
			n.active.Add(-1)
			close(ch)
		}()
		return func() error { <-ch; return nil }, nil
	}
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
}

func newPipeline(env *dptest.Env, bufs int, try bool) *Pipeline {
	return &Pipeline{Env: env, Pool: NewPool(env, bufs, chunk), Turns: make(chan struct{}, max(bufs/2, 1)),
		Done: make(chan struct{}), Chunk: chunk, TrySecond: try, Name: "peer", Label: "test"}
}

// quiet checks that nothing touches memory any more and every staging
// buffer is back, then frees them.
func quiet(t *testing.T, env *dptest.Env, p *Pipeline, n *network) {
	t.Helper()
	require.Zero(t, env.Active(), "a DMA still runs")
	require.Zero(t, n.active.Load(), "a network transfer still runs")
	require.Len(t, p.Pool.free, int(p.Pool.made.Load()), "a staging buffer is not back")
	require.Empty(t, p.Turns, "the turn is not given back")
	require.NoError(t, p.Pool.Close())
	require.Zero(t, env.Allocated())
	n.wg.Wait()
	env.Wait()
}

// TestPipelineMoves: every byte arrives, out and in, for sizes around the
// chunk, with two buffers, one (a pool of one: TrySecond finds none), and
// two taken with TrySecond.
func TestPipelineMoves(t *testing.T) {
	for _, mode := range []struct {
		name string
		bufs int
		try  bool
	}{{"two buffers", 4, false}, {"one buffer", 1, true}, {"try second", 4, true}} {
		for _, size := range []int{1, chunk - 1, chunk, chunk + 1, 2 * chunk, 5*chunk + 3} {
			name := fmt.Sprintf("%s/%d", mode.name, size)
			env := &dptest.Env{}
			p := newPipeline(env, mode.bufs, mode.try)
			dev := env.NewBuf(size+100, true)
			fill(dev.Bytes(), uint64(size))
			n := &network{remote: make([]byte, size)}
			require.NoError(t, p.Out(context.Background(), datapath.Mem{B: dev, Off: 100, Len: uint64(size)}, n.net(true)), name)
			require.True(t, bytes.Equal(dev.Bytes()[100:], n.remote), "%s: out", name)
			back := env.NewBuf(size, true)
			require.NoError(t, p.In(context.Background(), datapath.Mem{B: back, Len: uint64(size)}, n.net(false)), name)
			require.True(t, bytes.Equal(back.Bytes(), n.remote), "%s: in", name)
			chunks := (size + chunk - 1) / chunk
			require.Len(t, n.calls, 2*chunks, name)
			quiet(t, env, p, n)
		}
	}
}

// TestPipelineCtx: when ctx ends mid-transfer, no further chunk starts,
// the transfer ends with ErrCanceled (ErrTimeout for a deadline), and
// only once every DMA and network transfer it started has ended, every
// staging buffer back in the pool.
func TestPipelineCtx(t *testing.T) {
	for _, dir := range []string{"out", "in"} {
		for _, cancelAt := range []int{0, 1, 3} {
			name := fmt.Sprintf("%s/cancel at chunk %d", dir, cancelAt)
			env := &dptest.Env{}
			p := newPipeline(env, 4, false)
			const chunks = 20
			dev := env.NewBuf(chunks*chunk, true)
			n := &network{remote: make([]byte, chunks*chunk)}
			ctx, cancel := context.WithCancel(context.Background())
			n.onCall = func(i int) error {
				if i == cancelAt {
					cancel()
				}
				return nil
			}
			run := p.Out
			if dir == "in" {
				run = p.In
			}
			err := run(ctx, datapath.Mem{B: dev, Len: chunks * chunk}, n.net(dir == "out"))
			require.ErrorIs(t, err, gxerr.Canceled, name)
			require.ErrorIs(t, err, context.Canceled, name)
			require.LessOrEqual(t, len(n.calls), cancelAt+2, "%s: chunks started after the cancellation: %v", name, n.calls)
			quiet(t, env, p, n)
		}
	}
	t.Run("deadline", func(t *testing.T) {
		env := &dptest.Env{}
		p := newPipeline(env, 4, false)
		dev := env.NewBuf(4*chunk, true)
		n := &network{remote: make([]byte, 4*chunk)}
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		require.ErrorIs(t, p.Out(ctx, datapath.Mem{B: dev, Len: 4 * chunk}, n.net(true)), gxerr.Timeout)
		require.Empty(t, n.calls)
		require.Zero(t, env.DMAs(), "nothing started")
		quiet(t, env, p, n)
	})
	// Waiting for a turn or a staging buffer: ctx ends the wait, a
	// closed Done too (with the Err of the endpoint).
	t.Run("waits", func(t *testing.T) {
		env := &dptest.Env{}
		p := newPipeline(env, 2, false) // one turn
		p.Turns <- struct{}{}           // taken by another transfer
		dev := env.NewBuf(chunk, true)
		n := &network{remote: make([]byte, chunk)}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		err := p.Out(ctx, datapath.Mem{B: dev, Len: chunk}, n.net(true))
		require.ErrorIs(t, err, gxerr.Timeout)
		require.Contains(t, err.Error(), "peer: waiting for test staging")
		<-p.Turns
		b := p.Pool.TryGet()
		b2 := p.Pool.TryGet() // every buffer taken
		failed := errors.New("endpoint failed")
		p.Err = func() error { return failed }
		done := make(chan struct{})
		p.Done = done
		close(done)
		require.ErrorIs(t, p.Out(context.Background(), datapath.Mem{B: dev, Len: chunk}, n.net(true)), failed)
		require.Empty(t, p.Turns)
		p.Pool.Put(b)
		p.Pool.Put(b2)
		quiet(t, env, p, n)
	})
}

// TestPipelineErrors: a DMA that fails ends the transfer (by default) or
// sends zeros for the rest (ZeroOnDMAError, returning the DMA's error at
// the end); a chunk that cannot start ends it; in every case after what
// had started.
func TestPipelineErrors(t *testing.T) {
	dmaFails := errors.New("dma failed")
	const chunks = 6
	for _, tc := range []struct {
		name    string
		zero    bool
		failDMA int // the DMA of this chunk fails (-1: none)
		failNet int // the network half of this chunk does not start (-1: none)
		want    error
	}{
		{"dma", false, 2, -1, dmaFails},
		{"dma, zeros", true, 2, -1, ErrSource},
		{"net", false, -1, 3, gxerr.NotSupported},
	} {
		env := &dptest.Env{}
		dev := env.NewBuf(chunks*chunk, true)
		fill(dev.Bytes(), 3)
		var dmaN atomic.Int32
		env.DMAHook = func(dst, src datapath.Mem) error {
			if int(dmaN.Add(1))-1 == tc.failDMA {
				return dmaFails
			}
			return nil
		}
		p := newPipeline(env, 4, false)
		p.ZeroOnDMAError = tc.zero
		n := &network{remote: make([]byte, chunks*chunk)}
		n.onCall = func(i int) error {
			if i == tc.failNet {
				return gxerr.New(gxerr.NotSupported, "no start", nil)
			}
			return nil
		}
		err := p.Out(context.Background(), datapath.Mem{B: dev, Len: chunks * chunk}, n.net(true))
		require.ErrorIs(t, err, tc.want, tc.name)
		if tc.zero {
			require.ErrorIs(t, err, dmaFails, tc.name)
			off := tc.failDMA * chunk
			require.True(t, bytes.Equal(dev.Bytes()[:off], n.remote[:off]), "%s: the chunks before", tc.name)
			require.Equal(t, make([]byte, len(n.remote)-off), n.remote[off:], "%s: zeros from the failed chunk on", tc.name)
			require.Len(t, n.calls, chunks, "%s: every chunk goes out", tc.name)
		}
		quiet(t, env, p, n)
	}
}
