package engine

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
)

// TestListOpCompleteOK: a list's elements are counted once each, whether
// they end through CompleteOK (any order, duplicates, out-of-range
// indices, several calls) or Complete; the bytes counted are those of the
// elements that ended, the future resolves when every one has, and the
// requests go back to the pool once, also, the list's caller let go.
func TestListOpCompleteOK(t *testing.T) {
	p := listenDialPair(t, "unix", t.TempDir()+"/s.sock")
	tests := []struct {
		name  string
		n     int
		fail  []int   // ended first by Complete with an error
		calls [][]int // CompleteOK's calls, in turn
	}{
		{"all at once", 100, nil, [][]int{seq(0, 100)}},
		{"over 1024 elements", 1500, nil, [][]int{seq(0, 1500)}},
		{"two halves", 130, nil, [][]int{seq(0, 65), seq(65, 130)}},
		{"reversed", 70, nil, [][]int{rev(seq(0, 70))}},
		{"duplicates and strays", 70, nil, [][]int{append(seq(0, 70), 3, 3, 69, -1, 70, 1000)}},
		{"again", 64, nil, [][]int{seq(0, 64), seq(0, 64)}},
		{"some failed first", 200, []int{0, 63, 64, 199}, [][]int{seq(0, 200)}},
		{"all failed first", 3, []int{0, 1, 2}, [][]int{seq(0, 3)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := p.ab.Stats().Ops
			reqs := make([]datapath.Req, tt.n)
			var total uint64
			for i := range reqs {
				reqs[i].Local.Len = uint64(i + 1)
				total += uint64(i + 1)
			}
			o := newListOp(p.ab, reqs, total)
			failed := map[int]bool{}
			for _, i := range tt.fail {
				o.Complete(i, errors.New("failed"))
				failed[i] = true
			}
			for _, idx := range tt.calls {
				o.CompleteOK(idx)
			}
			require.True(t, o.IsDone())
			require.NotNil(t, o.reqs, "held until its caller lets go")
			o.release()
			require.Nil(t, o.reqs, "given back once every element ended and the caller let go")
			var okBytes uint64
			for i := range tt.n {
				if !failed[i] {
					okBytes += uint64(i + 1)
				}
			}
			after := p.ab.Stats().Ops
			require.Equal(t, uint64(tt.n-len(tt.fail)), after.Completed-before.Completed)
			require.Equal(t, uint64(len(tt.fail)), after.Failed-before.Failed)
			require.Equal(t, okBytes, after.Bytes-before.Bytes)
			errs := o.Errs()
			for i := range tt.n {
				if failed[i] {
					require.Error(t, errs[i], "element %d", i)
				} else if errs != nil {
					require.NoError(t, errs[i], "element %d", i)
				}
			}
		})
	}
}

func seq(from, to int) []int {
	s := make([]int, 0, to-from)
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

func rev(s []int) []int {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
	return s
}
