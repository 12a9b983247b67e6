package wire

import (
	"math"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestConnMaxFrameBounds: NewConn clamps ConnConfig.MaxFrame into
// [HeaderSize, MaxFrameLimit] (0 or less: MaxFrame). The receive buffer
// is allocated at this size: 1<<40 ended the process in make ("fatal
// error: runtime: out of memory"), though no frame can be longer than
// its header's 32-bit Length allows.
func TestConnMaxFrameBounds(t *testing.T) {
	tests := []struct {
		name string
		max  int
		want int
	}{
		{"negative", -1, MaxFrame},
		{"zero", 0, MaxFrame},
		{"below a header", 1, HeaderSize},
		{"default", MaxFrame, MaxFrame},
		{"1<<40", 1 << 40, int(MaxFrameLimit)},
		{"max int", math.MaxInt, int(MaxFrameLimit)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer b.Close()
			c := NewConn(NewStreamTransport(a), ConnConfig{MaxFrame: tt.max})
			defer c.Close()
			require.Equal(t, tt.want, c.MaxFrame())
			require.Len(t, c.rbuf, tt.want)
		})
	}
}
