package cq

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTrackPollCloseStress runs many Tracks, TrackTickets and Polls, with
// deadlines (some met while a Track waits for room), contexts that end,
// OnDones and OnTimeouts that panic, and CSs ending at random, while
// Close begins with a random grace. Every submission a Track accepted
// gets exactly one OnDone and a refused one none; nothing stays counted
// (Outstanding, the room tokens), and TestMain finds no goroutine left.
func TestTrackPollCloseStress(t *testing.T) {
	for round := range 6 {
		rng := rand.New(rand.NewPCG(uint64(round), 7))
		w := newFakeWaiter()
		a := NewDeviceActor("fake", w, ActorConfig{
			// No spin (-1) on odd rounds: the actor blocks in WAIT_CS at
			// once, on a goroutine of its own.
			MaxOutstanding: 1 + round%3, BlockTimeout: time.Duration(1+round%3) * 200 * time.Microsecond,
			Spin: time.Duration(round%2) * -1, RetireHorizon: 4,
			OnDeadline: func() {},
		})
		const workers, perWorker = 6, 40
		var seqs atomic.Uint64
		var dones [workers*perWorker + 1]atomic.Int32
		var accepted [workers*perWorker + 1]atomic.Bool
		submitted := make(chan uint64, workers*perWorker)
		var wg sync.WaitGroup
		for wk := range workers {
			seed := rng.Uint64()
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(wk)))
				for range perWorker {
					seq := seqs.Add(1)
					s := Submission{Seq: seq, OnDone: func(error) {
						dones[seq].Add(1)
						if seq%7 == 0 {
							panic("OnDone")
						}
					}}
					if r.IntN(2) == 0 {
						s.Deadline = time.Now().Add(time.Duration(r.IntN(300)) * time.Microsecond)
						s.OnTimeout = func(now time.Time) time.Time {
							if seq%5 == 0 {
								panic("OnTimeout")
							}
							if seq%3 == 0 {
								return now.Add(100 * time.Microsecond)
							}
							return time.Time{}
						}
					}
					ctx, cancel := context.Background(), context.CancelFunc(func() {})
					if r.IntN(4) == 0 {
						ctx, cancel = context.WithTimeout(ctx, time.Duration(r.IntN(200))*time.Microsecond)
					}
					if r.IntN(2) == 0 {
						if a.Track(ctx, s) == nil {
							accepted[seq].Store(true)
							submitted <- seq
						}
					} else if tk, err := a.TrackTicket(ctx, s); err == nil {
						accepted[seq].Store(true)
						submitted <- seq
						if r.IntN(2) == 0 {
							tk.Watch()
							for range 20 {
								if tk.Poll() {
									break
								}
								time.Sleep(10 * time.Microsecond)
							}
							tk.Unwatch()
						}
					}
					cancel()
				}
			}()
		}
		// CSs end at random (some fail), never all of them: Close ends
		// the rest.
		finished := make(chan struct{})
		fseed := rng.Uint64()
		go func() {
			defer close(finished)
			r := rand.New(rand.NewPCG(fseed, 1))
			for range workers * perWorker {
				select {
				case seq := <-submitted:
					if r.IntN(10) != 0 {
						var err error
						if r.IntN(5) == 0 {
							err = ErrClosed
						}
						w.finish(seq, err)
					}
				case <-time.After(20 * time.Millisecond):
					return
				}
			}
		}()
		time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond)
		a.Close(time.Duration(rng.IntN(3)) * time.Millisecond)
		wg.Wait()
		<-finished
		for seq := range dones {
			if seq == 0 {
				continue
			}
			want := int32(0)
			if accepted[seq].Load() {
				want = 1
			}
			require.Equal(t, want, dones[seq].Load(), "round %d: OnDones of CS %d (accepted %v)", round, seq, accepted[seq].Load())
		}
		require.Zero(t, a.Outstanding(), "round %d", round)
		require.Zero(t, len(a.slots), "round %d: room tokens left", round)
	}
}
