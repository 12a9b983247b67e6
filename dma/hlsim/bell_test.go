package hlsim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBell checks that no ring is lost between a worker's spin, its
// decision to park and its sleep, and that a spinning worker is not sent
// a token it would have to take later.
func TestBell(t *testing.T) {
	quit := make(chan struct{})
	cases := []struct {
		name string
		run  func(b *bell) (got []bool)
		want []bool
	}{
		{"ring while spinning is seen by the spin", func(b *bell) []bool {
			woken := b.ring()
			return []bool{woken, b.spin(quit, time.Second), len(b.ch) == 0}
		}, []bool{false, true, true}},
		{"the mark is taken once", func(b *bell) []bool {
			b.ring()
			return []bool{b.take(), b.take()}
		}, []bool{true, false}},
		{"a ring before the park keeps the worker awake", func(b *bell) []bool {
			b.ring()
			return []bool{b.park(), b.parked.Load()}
		}, []bool{false, false}},
		{"a ring while parked sends the token", func(b *bell) []bool {
			parked := b.park()
			woken := b.ring()
			return []bool{parked, woken, len(b.ch) == 1}
		}, []bool{true, true, true}},
		{"two rings while parked leave one token", func(b *bell) []bool {
			b.park()
			b.ring()
			b.ring()
			<-b.ch
			b.unpark()
			return []bool{len(b.ch) == 0, b.parked.Load()}
		}, []bool{true, false}},
		{"no ring: the spin ends with its window", func(b *bell) []bool {
			return []bool{b.spin(quit, time.Millisecond), b.spin(quit, 0)}
		}, []bool{false, false}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBell()
			require.Equal(t, tc.want, tc.run(&b))
		})
	}
	t.Run("quit ends the spin", func(t *testing.T) {
		b := newBell()
		closed := make(chan struct{})
		close(closed)
		require.False(t, b.spin(closed, time.Hour))
	})
	t.Run("a ring from another goroutine ends a sleep", func(t *testing.T) {
		b := newBell()
		for range 1000 {
			done := make(chan struct{})
			go func() {
				b.ring()
				close(done)
			}()
			if b.park() {
				select {
				case <-b.ch:
				case <-time.After(10 * time.Second):
					t.Fatal("a ring was lost")
				}
				b.unpark()
			}
			<-done
			b.take()
			select { // a token left by a ring that found it parked
			case <-b.ch:
			default:
			}
		}
	})
}
