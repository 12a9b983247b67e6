package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEngineZeroValue: an Engine not made by New (a declared Engine{}, or
// a nil *Engine) refuses every operation with ErrInvalid (NewBatch's
// batch is refused by Submit), and its getters give zero values. Nearly
// every method panicked on its nil gates, copier or endpoint maps (a nil
// one in all of them).
func TestEngineZeroValue(t *testing.T) {
	ctx := context.Background()
	real := newEngine(t, Config{Devices: DevicesNone})
	h, err := real.Alloc(4096, Host)
	require.NoError(t, err)
	inv := func(t *testing.T, err error) { t.Helper(); require.ErrorIs(t, err, ErrInvalid) }
	checkZeroMethods(t, []zeroCall[Engine]{
		{"Config", func(t *testing.T, e *Engine) { require.Zero(t, e.Config()) }},
		{"NumDevices", func(t *testing.T, e *Engine) { require.Zero(t, e.NumDevices()) }},
		{"Devices", func(t *testing.T, e *Engine) { require.Empty(t, e.Devices()) }},
		{"Stats", func(t *testing.T, e *Engine) { require.Zero(t, e.Stats()) }},
		{"EndpointStats", func(t *testing.T, e *Engine) { require.Empty(t, e.EndpointStats()) }},
		{"ClosedEndpointStats", func(t *testing.T, e *Engine) { require.Empty(t, e.ClosedEndpointStats()) }},
		{"RDMA", func(t *testing.T, e *Engine) {
			r := e.RDMA()
			require.False(t, r.Available)
			require.NotEmpty(t, r.Reason)
		}},
		{"Alloc", func(t *testing.T, e *Engine) {
			b, err := e.Alloc(4096, Host)
			require.Nil(t, b)
			inv(t, err)
		}},
		{"Register", func(t *testing.T, e *Engine) {
			b, err := e.Register(make([]byte, 64))
			require.Nil(t, b)
			inv(t, err)
		}},
		{"Attach", func(t *testing.T, e *Engine) {
			a, err := e.Attach(AttachConfig{})
			require.Nil(t, a)
			inv(t, err)
		}},
		{"Lookup", func(t *testing.T, e *Engine) {
			s, err := e.Lookup(h.Addr(), 16)
			require.Zero(t, s)
			inv(t, err)
		}},
		{"LookupDevice", func(t *testing.T, e *Engine) {
			s, err := e.LookupDevice(0, 0x1000, 16)
			require.Zero(t, s)
			inv(t, err)
		}},
		{"Copy", func(t *testing.T, e *Engine) { inv(t, e.Copy(ctx, h.Slice(0, 8), h.Slice(8, 8)).Wait(ctx)) }},
		{"CopySync", func(t *testing.T, e *Engine) { inv(t, e.CopySync(ctx, h.Slice(0, 8), h.Slice(8, 8))) }},
		{"NewBatch", func(t *testing.T, e *Engine) {
			b := e.NewBatch()
			b.Copy(h.Slice(0, 8), h.Slice(8, 8))
			inv(t, b.Submit(ctx).Wait(ctx))
		}},
		{"Listen", func(t *testing.T, e *Engine) {
			l, err := e.Listen("tcp", "127.0.0.1:0")
			require.Nil(t, l)
			inv(t, err)
		}},
		{"Dial", func(t *testing.T, e *Engine) {
			ep, err := e.Dial(ctx, "tcp", "127.0.0.1:1")
			require.Nil(t, ep)
			inv(t, err)
		}},
		{"WaitDevice", func(t *testing.T, e *Engine) { inv(t, e.WaitDevice(ctx, 0)) }},
		{"Emulator", func(t *testing.T, e *Engine) {
			em, err := e.Emulator(0)
			require.Nil(t, em)
			inv(t, err)
		}},
		{"Close", func(t *testing.T, e *Engine) { inv(t, e.Close()) }},
	})
}
