package agent

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// TestPublishRecordTooLarge: a Publish whose section would take the
// record past its size limit is refused with ErrInvalid and changes
// nothing: the record still encodes and the next Publish that fits
// succeeds. The section used to be kept, after which the record no
// longer encoded (every later publication failed and no peer could read
// it). The limit is lowered here: at meta.MaxRecord (8 MiB) it takes
// tens of thousands of sections.
func TestPublishRecordTooLarge(t *testing.T) {
	old := maxRecord
	t.Cleanup(func() { maxRecord = old })
	eng := newEngine(t)
	a := newAgent(t, eng, "big", agentOpts{unix: true})
	buf := alloc(t, eng, 1<<20, engine.Host)
	md := a.Metadata()
	maxRecord = md.Size() + 4096 // room for a few sections
	var published int
	for i := 0; ; i++ {
		err := a.Publish(fmt.Sprintf("section-%03d", i), buf.Slice(i*4096, 4096))
		if err != nil {
			require.ErrorIs(t, err, engine.ErrInvalid)
			break
		}
		published++
		require.Less(t, published, 200, "never refused")
	}
	require.NotZero(t, published)
	md = a.Metadata()
	require.Len(t, md.Sections, published, "the refused section was kept")
	require.LessOrEqual(t, md.Size(), maxRecord)
	_, err := md.Encode()
	require.NoError(t, err)
	// Room again after a Withdraw: the agent still publishes.
	require.NoError(t, a.Withdraw("section-000"))
	require.NoError(t, a.Publish("section-000", buf.Slice(0, 4096)))
}
