package tcp

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
)

// TestPathInFlight: a connection has a copy into local memory in flight
// (a listener then does not close its endpoint to make room) while the
// reader lands a Data frame of a transfer or its staging DMAs run; not
// while a transfer waits for its next Data frame (a peer that stops
// sending one is idle, not busy).
func TestPathInFlight(t *testing.T) {
	tests := []struct {
		name     string
		routing  bool
		dmas     int
		staging  int32 // the DMAs of a transfer landed whole (no longer in the map)
		inFlight bool
	}{
		{"waiting for its bytes", false, 0, 0, false},
		{"landing a frame", true, 0, 0, true},
		{"staging DMAs", false, 1, 0, true},
		{"staging DMAs of a landed transfer", false, 0, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := &fakeEnv{mem: &hostBuf{mem: make([]byte, 4096)}}
			p := newPath(New(env), &fakeCtrl{env: env})
			require.False(t, p.InFlight())
			in := &inbound{id: 2, dst: datapath.Mem{B: env.mem, Len: 4096}, n: 4096, onDone: discardDone{}}
			require.NoError(t, p.addInbound(in))
			in.mu.Lock()
			in.routing, in.dmas = tt.routing, tt.dmas
			in.mu.Unlock()
			p.staging.Add(tt.staging)
			require.Equal(t, tt.inFlight, p.InFlight())
		})
	}
}
