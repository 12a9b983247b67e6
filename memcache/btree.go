package memcache

import "math"

// This file holds the address index shared by Cache and TypeCache: a
// persistent (copy-on-write) B+tree from uint64 keys to values.
//
// Every update returns a new root and never modifies a node reachable from an
// older root, so a reader that loaded a root from an atomic pointer can search
// it without any lock while the single writer (who holds the owner's mutex)
// builds and publishes the next version. An update copies only the O(log n)
// nodes on the path from the root to the changed leaf.
//
// Leaves hold sorted keys with their values; an internal node holds its
// children and, for each child, the smallest key in that child's subtree. All
// leaves are at the same depth and every node other than the root holds
// between nodeMin and nodeMax entries, so the depth is O(log n) with a large
// base: three levels hold more than 100k entries.
//
// Lookups are what matters, so nodes are laid out for them: keys, values and
// children are inline arrays (no slice headers to chase), and a one-cache-line
// summary holding every eighth key lets a search read two lines of keys
// instead of binary-searching across eight, with comparisons that compile to
// conditional moves rather than unpredictable branches.

const (
	nodeMax   = 64                  // entries per node
	nodeMin   = nodeMax / 4         // entries per non-root node, at least
	groupSize = 8                   // keys per summary entry (one cache line)
	groups    = nodeMax / groupSize // summary entries
	noKey     = math.MaxUint64      // fills unused key slots; never a real key
)

// node is one B+tree node. A nil *node is the empty tree. Nodes are immutable
// once reachable from a published root. Real keys are < noKey.
type node[V any] struct {
	sum  [groups]uint64    // sum[g] = keys[g*groupSize]
	keys [nodeMax]uint64   // sorted; in an internal node keys[i] is the smallest key under kids[i]; keys[n:] = noKey
	n    int               // entries in use
	leaf bool              // vals are used, not kids
	vals [nodeMax]V        // leaf only
	kids [nodeMax]*node[V] // internal only
}

// newNode builds a node from sorted keys and either values (a leaf) or
// children (kids != nil).
func newNode[V any](keys []uint64, vals []V, kids []*node[V]) *node[V] {
	n := &node[V]{n: len(keys), leaf: kids == nil}
	copy(n.keys[:], keys)
	for i := len(keys); i < nodeMax; i++ {
		n.keys[i] = noKey
	}
	for g := range n.sum {
		n.sum[g] = n.keys[g*groupSize]
	}
	if kids == nil {
		copy(n.vals[:], vals)
	} else {
		copy(n.kids[:], kids)
	}
	return n
}

// rank returns the number of keys <= key. key must be < noKey.
func (n *node[V]) rank(key uint64) int {
	g := 0
	for _, s := range n.sum[1:] {
		g += b2i(s <= key)
	}
	base := g * groupSize
	c := 0
	for _, k := range (*[groupSize]uint64)(n.keys[base:]) {
		c += b2i(k <= key)
	}
	return base + c
}

// b2i converts a bool to 0 or 1 without a branch.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Slice views of the used part of a node.
func (n *node[V]) keyS() []uint64   { return n.keys[:n.n] }
func (n *node[V]) valS() []V        { return n.vals[:n.n] }
func (n *node[V]) kidS() []*node[V] { return n.kids[:n.n] }

// floor returns the entry with the greatest key <= key.
func (n *node[V]) floor(key uint64) (k uint64, v V, ok bool) {
	if key == noKey {
		key-- // no key equals noKey
	}
	for n != nil {
		i := n.rank(key) - 1
		if i < 0 {
			break
		}
		if n.leaf {
			return n.keys[i], n.vals[i], true
		}
		n = n.kids[i]
	}
	return k, v, false
}

// ascend calls fn for every entry with a key >= from, in key order, until fn
// returns false. It reports whether the iteration ran to the end.
func (n *node[V]) ascend(from uint64, fn func(k uint64, v V) bool) bool {
	if n == nil || from == noKey {
		return true
	}
	if n.leaf {
		i := n.rank(from)
		if i > 0 && n.keys[i-1] == from {
			i--
		}
		for ; i < n.n; i++ {
			if !fn(n.keys[i], n.vals[i]) {
				return false
			}
		}
		return true
	}
	for i := max(n.rank(from)-1, 0); i < n.n; i++ {
		if !n.kids[i].ascend(from, fn) {
			return false
		}
	}
	return true
}

// insertAt returns a copy of s with x inserted at index i.
func insertAt[T any](s []T, i int, x T) []T {
	out := make([]T, len(s)+1)
	copy(out, s[:i])
	out[i] = x
	copy(out[i+1:], s[i:])
	return out
}

// removeAt returns a copy of s without index i.
func removeAt[T any](s []T, i int) []T {
	out := make([]T, len(s)-1)
	copy(out, s[:i])
	copy(out[i:], s[i+1:])
	return out
}

// insert returns a new tree with key mapped to v. The key must not be present
// and must be < noKey.
func (n *node[V]) insert(key uint64, v V) *node[V] {
	if n == nil {
		return newNode([]uint64{key}, []V{v}, nil)
	}
	a, b := n.ins(key, v)
	if b == nil {
		return a
	}
	return newNode([]uint64{a.keys[0], b.keys[0]}, nil, []*node[V]{a, b})
}

// ins inserts into the subtree rooted at n and returns its replacement,
// split in two when it overflowed.
func (n *node[V]) ins(key uint64, v V) (*node[V], *node[V]) {
	i := n.rank(key)
	if n.leaf {
		return split(insertAt(n.keyS(), i, key), insertAt(n.valS(), i, v), nil, i == n.n)
	}
	ci := max(i-1, 0) // a key below every key goes into the first child
	a, b := n.kids[ci].ins(key, v)
	keys, kids := append([]uint64(nil), n.keyS()...), append([]*node[V](nil), n.kidS()...)
	keys[ci], kids[ci] = a.keys[0], a
	if b != nil {
		keys, kids = insertAt(keys, ci+1, b.keys[0]), insertAt(kids, ci+1, b)
	}
	return split(keys, nil, kids, b != nil && ci+1 == len(kids)-1)
}

// split builds one node from the entries, or two if there are more than
// nodeMax: halves, or, when the overflow came from appending at the end (as
// ascending inserts do), a full left node and a minimal right one, so that
// ascending inserts leave nodes mostly full rather than half empty.
func split[V any](keys []uint64, vals []V, kids []*node[V], appended bool) (*node[V], *node[V]) {
	if len(keys) <= nodeMax {
		return newNode(keys, vals, kids), nil
	}
	h := len(keys) / 2
	if appended {
		h = len(keys) - nodeMin
	}
	if kids == nil {
		return newNode(keys[:h], vals[:h], nil), newNode(keys[h:], vals[h:], nil)
	}
	return newNode(keys[:h], nil, kids[:h]), newNode(keys[h:], nil, kids[h:])
}

// delete returns a new tree without key and whether key was present.
func (n *node[V]) delete(key uint64) (*node[V], bool) {
	if n == nil || key == noKey {
		return n, false
	}
	m, ok := n.del(key)
	if !ok {
		return n, false
	}
	for m != nil && !m.leaf && m.n == 1 {
		m = m.kids[0] // the root lost all but one child: drop a level
	}
	return m, true
}

// del deletes from the subtree rooted at n. It returns the replacement (nil
// when it became empty), which may be underfull; the parent rebalances it.
func (n *node[V]) del(key uint64) (*node[V], bool) {
	i := n.rank(key) - 1
	if i < 0 {
		return n, false
	}
	if n.leaf {
		if n.keys[i] != key {
			return n, false
		}
		if n.n == 1 {
			return nil, true
		}
		return newNode(removeAt(n.keyS(), i), removeAt(n.valS(), i), nil), true
	}
	c, ok := n.kids[i].del(key)
	if !ok {
		return n, false
	}
	keys, kids := append([]uint64(nil), n.keyS()...), append([]*node[V](nil), n.kidS()...)
	switch {
	case c == nil:
		keys, kids = removeAt(keys, i), removeAt(kids, i)
	case c.n >= nodeMin || len(kids) == 1:
		keys[i], kids[i] = c.keys[0], c
	default:
		// Underfull: combine with a sibling, then split again if the
		// result is too big. Either way both halves end up >= nodeMin.
		l, r := i, i+1
		if r == len(kids) {
			l, r = i-1, i
		}
		left, right := kids[l], kids[r]
		if l == i {
			left = c
		} else {
			right = c
		}
		ck := append(append([]uint64(nil), left.keyS()...), right.keyS()...)
		var a, b *node[V]
		if left.leaf {
			a, b = split(ck, append(append([]V(nil), left.valS()...), right.valS()...), nil, false)
		} else {
			a, b = split(ck, nil, append(append([]*node[V](nil), left.kidS()...), right.kidS()...), false)
		}
		keys[l], kids[l] = a.keys[0], a
		if b != nil {
			keys[r], kids[r] = b.keys[0], b
		} else {
			keys, kids = removeAt(keys, r), removeAt(kids, r)
		}
	}
	if len(kids) == 0 {
		return nil, true
	}
	return newNode(keys, nil, kids), true
}
