package engine

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGaudiBatchAllocations: host-to-Gaudi copies on the emulated device,
// objects allocated per batch (the emulator's included: it runs in this
// process). A batch of 256 allocates under a fifth of an object per copy:
// the copier sizes a CS's lists for its copies at once, and the WAIT_CS
// polls that find its end allocate nothing (it was about one per copy,
// 252, from lists grown copy by copy and one allocation per poll; on
// gaudi3 1072, four per copy, from the model's per-packet translations,
// boxed packets and bounce buffers, then 39, now 14). A lone copy
// allocates 11 objects on gaudi2 and 3 on gaudi3: its future (which
// holds its job), the CS's ticket and the Gaudi3 submission's record (22
// and 23 before its job's op, its CS's lists, command buffer slots and
// chunks used inline buffers, the command buffer pool's methods were
// bound once, the Gaudi3 model's queues and counter translation kept
// their arrays, and the copier reused its CS records, builders and
// callbacks). Under the race detector a sync.Pool drops some of what it
// is given, so the CS records are made again now and then.
func TestGaudiBatchAllocations(t *testing.T) {
	for _, tc := range []struct {
		model     string
		batch     int
		maxAllocs float64
		maxRace   float64 // under the race detector (gaudi3: a packet's object per copy)
	}{
		{"gaudi2", 256, 64, 128},
		{"gaudi3", 256, 24, 400},
		{"gaudi2", 1, 11.5, 15.5},
		{"gaudi3", 1, 3.5, 7.5},
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
