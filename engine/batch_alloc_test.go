package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGaudiBatchAllocations: host-to-Gaudi copies on the emulated device,
// objects allocated per batch (the emulator's included: it runs in this
// process). A batch of 256 allocates under half an object per copy: the
// copier sizes a CS's lists for its copies at once, and the WAIT_CS polls
// that find its end allocate nothing (it was about one per copy, 252,
// from lists grown copy by copy and one allocation per poll; on gaudi3
// 1072, four per copy, from the model's per-packet translations, boxed
// packets and bounce buffers, now 39). A lone copy allocates 16 objects
// on gaudi2 and 8 on gaudi3 (22 and 23 before its job's op, its CS's
// lists, command buffer slots and chunks used inline buffers, the command
// buffer pool's methods were bound once, and the Gaudi3 model's queues and
// counter translation kept their arrays).
func TestGaudiBatchAllocations(t *testing.T) {
	for _, tc := range []struct {
		model     string
		batch     int
		maxAllocs float64
		maxRace   float64 // under the race detector (gaudi3: a packet's object per copy)
	}{
		{"gaudi2", 256, 128, 128},
		{"gaudi3", 256, 64, 400},
		{"gaudi2", 1, 16.5, 16.5},
		{"gaudi3", 1, 8.5, 9.5},
	} {
		t.Run(fmt.Sprintf("%s/batch=%d", tc.model, tc.batch), func(t *testing.T) {
			e := newEngine(t, Config{Emulator: EmulatorConfig{Model: tc.model}})
			const size = 4096
			h, err := e.Alloc(size*tc.batch, Host)
			require.NoError(t, err)
			d, err := e.Alloc(size*tc.batch, Gaudi(0))
			require.NoError(t, err)
			ctx := context.Background()
			bt := e.NewBatch()
			run := func() {
				for i := range tc.batch {
					bt.Copy(d.Slice(i*size, size), h.Slice(i*size, size))
				}
				if err := bt.Submit(ctx).Wait(ctx); err != nil {
					panic(err)
				}
			}
			run()
			allocs := testing.AllocsPerRun(200, run)
			t.Logf("%.1f objects per batch of %d copies", allocs, tc.batch)
			limit := tc.maxAllocs
			if raceEnabled {
				limit = tc.maxRace
			}
			require.Less(t, allocs, limit, "objects allocated per batch")
		})
	}
}
