package engine

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAttachmentZeroValue: an Attachment not made by Engine.Attach (a
// declared Attachment{}, or a nil *Attachment) refuses Register and
// Detach with ErrInvalid, Stats is zero, and Location names no device
// any buffer can be allocated at. Register, Detach and Stats panicked on
// the zero one's nil engine and runtime, Location on a nil one; and a
// zero one's Location was attached0, another attachment's.
func TestAttachmentZeroValue(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	checkZeroMethods(t, []zeroCall[Attachment]{
		{"Location", func(t *testing.T, a *Attachment) {
			loc := a.Location()
			require.NotEqual(t, Host, loc)
			require.NotEqual(t, Location{gaudi: true, dev: 0, attached: true}, loc, "the first attachment's")
			b, err := e.Alloc(4096, loc)
			require.Nil(t, b)
			require.Error(t, err)
		}},
		{"Register", func(t *testing.T, a *Attachment) {
			b, err := a.Register(0x1000, 4096)
			require.Nil(t, b)
			require.ErrorIs(t, err, ErrInvalid)
		}},
		{"Detach", func(t *testing.T, a *Attachment) { require.ErrorIs(t, a.Detach(), ErrInvalid) }},
		{"Stats", func(t *testing.T, a *Attachment) { require.Zero(t, a.Stats()) }},
	})
}
