package memcache

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkTree verifies the B+tree's structure: sorted keys, parent keys equal
// to the children's minimums, node sizes within bounds, uniform leaf depth.
// It returns the number of entries.
func checkTree[V any](n *node[V]) (int, error) {
	if n == nil {
		return 0, nil
	}
	leafDepth := -1
	var walk func(n *node[V], depth int, root bool) (int, error)
	walk = func(n *node[V], depth int, root bool) (int, error) {
		if n.n == 0 || n.n > nodeMax || (!root && n.n < nodeMin) {
			return 0, fmt.Errorf("node with %d entries (root %v)", n.n, root)
		}
		keys := n.keyS()
		if !slices.IsSorted(keys) || len(slices.Compact(slices.Clone(keys))) != len(keys) || keys[len(keys)-1] == noKey {
			return 0, fmt.Errorf("keys not strictly sorted: %v", keys)
		}
		for i := n.n; i < nodeMax; i++ {
			if n.keys[i] != noKey {
				return 0, fmt.Errorf("unused key slot %d holds %#x", i, n.keys[i])
			}
		}
		for g, s := range n.sum {
			if s != n.keys[g*groupSize] {
				return 0, fmt.Errorf("summary %d is %#x, key is %#x", g, s, n.keys[g*groupSize])
			}
		}
		if n.leaf {
			for _, k := range n.kids {
				if k != nil {
					return 0, fmt.Errorf("leaf with a child")
				}
			}
			if leafDepth < 0 {
				leafDepth = depth
			} else if leafDepth != depth {
				return 0, fmt.Errorf("leaves at depths %d and %d", leafDepth, depth)
			}
			return n.n, nil
		}
		if root && n.n < 2 {
			return 0, fmt.Errorf("internal root with one child")
		}
		total := 0
		for i, k := range n.kids {
			if (k == nil) != (i >= n.n) {
				return 0, fmt.Errorf("child slot %d of %d: %v", i, n.n, k)
			}
			if k == nil {
				continue
			}
			if k.keys[0] != n.keys[i] {
				return 0, fmt.Errorf("separator %#x != child minimum %#x", n.keys[i], k.keys[0])
			}
			if i > 0 && k.keys[0] <= n.kids[i-1].keys[n.kids[i-1].n-1] {
				return 0, fmt.Errorf("children out of order")
			}
			c, err := walk(k, depth+1, false)
			if err != nil {
				return 0, err
			}
			total += c
		}
		return total, nil
	}
	return walk(n, 0, true)
}

func TestTreeAgainstModel(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			var root *node[int]
			model := map[uint64]int{}
			keySpace := uint64(5000)
			for step := range 20000 {
				k := rng.Uint64N(keySpace) * 3
				old := root
				oldLen := len(model)
				if _, ok := model[k]; ok && rng.IntN(2) == 0 {
					var found bool
					root, found = root.delete(k)
					require.True(t, found)
					delete(model, k)
				} else if !ok {
					root = root.insert(k, step)
					model[k] = step
				} else {
					_, found := root.delete(k + 1)
					require.False(t, found)
				}
				if step%97 == 0 || step > 19900 {
					// The previous version is untouched (persistence).
					n, err := checkTree(old)
					require.NoError(t, err)
					require.Equal(t, oldLen, n)
					n, err = checkTree(root)
					require.NoError(t, err)
					require.Equal(t, len(model), n)
				}
				q := rng.Uint64N(keySpace*3 + 3)
				fk, fv, ok := root.floor(q)
				wk, wok := uint64(0), false // keys are multiples of 3
				for c := q - q%3; ; c -= 3 {
					if _, in := model[c]; in {
						wk, wok = c, true
						break
					}
					if c == 0 {
						break
					}
				}
				require.Equal(t, wok, ok, "floor(%d)", q)
				if ok {
					require.Equal(t, wk, fk)
					require.Equal(t, model[wk], fv)
				}
			}
			// Ascend from a few points, with early stop.
			keys := slices.Sorted(func(yield func(uint64) bool) {
				for k := range model {
					if !yield(k) {
						return
					}
				}
			})
			for _, from := range []uint64{0, 1, keys[len(keys)/2], keys[len(keys)/2] + 1, keySpace * 10} {
				var got []uint64
				root.ascend(from, func(k uint64, v int) bool {
					require.Equal(t, model[k], v)
					got = append(got, k)
					return len(got) < 100
				})
				i, _ := slices.BinarySearch(keys, from)
				want := keys[i:min(i+100, len(keys))]
				require.Equal(t, len(want), len(got))
				if len(want) > 0 {
					require.Equal(t, want, got)
				}
			}
			// Drain completely.
			for _, k := range keys {
				var found bool
				root, found = root.delete(k)
				require.True(t, found)
			}
			require.Nil(t, root)
		})
	}
}
