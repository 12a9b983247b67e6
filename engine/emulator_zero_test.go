package engine

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEmulatorZeroValue: an Emulator not made by Engine.Emulator (a
// declared Emulator{}, or a nil *Emulator, as one whose error was
// ignored) injects nothing, like one whose engine is closed, and its
// Device is -1, no device's index. Every method panicked on it (a nil
// emulated device), and a declared one's Device named gaudi0.
func TestEmulatorZeroValue(t *testing.T) {
	checkZeroMethods(t, []zeroCall[Emulator]{
		{"Device", func(t *testing.T, m *Emulator) { require.Equal(t, -1, m.Device()) }},
		{"HangNextCS", func(t *testing.T, m *Emulator) { m.HangNextCS(1) }},
		{"AbortNextCS", func(t *testing.T, m *Emulator) { m.AbortNextCS(1) }},
		{"DelayNextCS", func(t *testing.T, m *Emulator) { m.DelayNextCS(1, time.Millisecond) }},
		{"Reset", func(t *testing.T, m *Emulator) { m.Reset() }},
	})
}
