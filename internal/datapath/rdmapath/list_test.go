package rdmapath

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/wire"
)

// TestPickNIC: a list's request goes to the NIC with the fewest bytes so
// far among the first conns the key has an rkey for (the first on a tie).
func TestPickNIC(t *testing.T) {
	key := func(rkeys ...uint32) *wire.RemoteKey {
		k := &wire.RemoteKey{RKey: 10}
		copy(k.NICRKeys[:], rkeys)
		return k
	}
	tests := []struct {
		name     string
		load     []uint64
		conns    int
		key      *wire.RemoteKey
		nic      int
		wantRKey uint32
	}{
		{"one NIC", []uint64{5}, 1, key(11), 0, 10},
		{"tie: the first", []uint64{0, 0}, 2, key(11), 0, 10},
		{"second less loaded", []uint64{8, 0}, 2, key(11), 1, 11},
		{"no rkey on the second", []uint64{8, 0}, 2, key(), 0, 10},
		{"third of three", []uint64{8, 4, 2}, 3, key(11, 12), 2, 12},
		{"peer has more NICs than we", []uint64{8, 4, 0}, 2, key(11, 12), 1, 11},
		{"skips a NIC without rkey", []uint64{8, 4, 2}, 3, key(0, 12), 2, 12},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var load [1 + wire.MaxNICs]uint64
			copy(load[:], tc.load)
			nic, rkey := pickNIC(&load, tc.conns, tc.key)
			require.Equal(t, tc.nic, nic)
			require.Equal(t, tc.wantRKey, rkey)
		})
	}
}
