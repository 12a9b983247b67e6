package rdmapath

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/rdma"
)

// TestPostMoreThanQueueDepth: a chain of more work requests than a queue
// pair's send queue holds (maxSend; a part of over maxSend*maxWR bytes is
// one) is posted in waves, and so are chains of posts that together need
// more than the queue at once. (Before, post took a credit for every work
// request before posting any: a chain longer than the queue took every
// credit and waited for ever for one more, and two long chains could
// each hold part of the queue waiting for the rest.)
func TestPostMoreThanQueueDepth(t *testing.T) {
	const size = 64
	for _, tc := range []struct {
		name   string
		chains []int // work requests of each concurrent post
	}{
		{"one chain of the depth", []int{maxSend}},
		{"one chain over the depth", []int{maxSend + 1}},
		{"one chain of three depths", []int{3*maxSend - 1}},
		{"two chains of the depth at once", []int{maxSend, maxSend}},
		{"three chains over the depth at once", []int{maxSend + 5, maxSend / 2, 2 * maxSend}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := openTest(t, Config{})
			p := loopPath(t, tr)
			cn := p.conns[0]
			total := 0
			for _, n := range tc.chains {
				total += n
			}
			buf, mr := testMR(t, tr, 2*total*size)
			for i := range total * size {
				buf[i] = byte(i*7 + 1)
			}
			done := wrDone{cn: cn, ch: make(chan error, total)}
			// Bounds the wait of a post that cannot finish (the failure).
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			res := make(chan error, len(tc.chains))
			first := 0
			for _, n := range tc.chains {
				wrs := make([]rdma.WR, n)
				for i := range wrs {
					off := uint64((first + i) * size)
					wrs[i] = rdma.WR{Op: rdma.OpWrite, Local: []rdma.Seg{mr.Seg(off, size)},
						Remote: rdma.RemoteAddr{Addr: mr.Addr() + uint64(total*size) + off, RKey: mr.RKey()}, Done: done}
				}
				first += n
				go func() {
					posted, err := p.post(ctx, cn, wrs, nil)
					if err == nil && posted != len(wrs) {
						err = errShort
					}
					res <- err
				}()
			}
			for range tc.chains {
				require.NoError(t, <-res)
			}
			waitDone(ctx, t, done.ch, total)
			require.Equal(t, buf[:total*size], buf[total*size:], "the writes' bytes")
			require.Zero(t, cn.credits.used.Load(), "credits left taken")
		})
	}
}

var errShort = errorString("posted fewer work requests than given, without an error")

type errorString string

func (e errorString) Error() string { return string(e) }
