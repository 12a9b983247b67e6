package engine

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEndpointZeroValue: an Endpoint not made by Dial or Accept (a
// declared Endpoint{}, or a nil *Endpoint) refuses every operation with
// ErrInvalid and answers its getters with zero values, Done closed and Err
// ErrInvalid as for an endpoint that has ended. Every method panicked on
// its nil channel or engine; Close's panic was in a goroutine it started,
// which killed the process whatever the caller recovered.
func TestEndpointZeroValue(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	h, err := e.Alloc(4096, Host)
	require.NoError(t, err)
	key, err := h.Export()
	require.NoError(t, err)
	ctx := context.Background()
	s := h.Slice(0, 16)
	k := key.Slice(0, 16)
	inv := func(t *testing.T, err error) { t.Helper(); require.ErrorIs(t, err, ErrInvalid) }
	checkZeroMethods(t, []zeroCall[Endpoint]{
		{"Transport", func(t *testing.T, ep *Endpoint) { require.Equal(t, TransportAuto, ep.Transport()) }},
		{"Stats", func(t *testing.T, ep *Endpoint) { require.Zero(t, ep.Stats()) }},
		{"Peer", func(t *testing.T, ep *Endpoint) { require.Empty(t, ep.Peer()) }},
		{"Source", func(t *testing.T, ep *Endpoint) { require.Empty(t, ep.Source()) }},
		{"Done", func(t *testing.T, ep *Endpoint) {
			select {
			case <-ep.Done():
			default:
				t.Fatal("Done of an endpoint not made by the engine is not closed")
			}
		}},
		{"Err", func(t *testing.T, ep *Endpoint) { inv(t, ep.Err()) }},
		{"Close", func(t *testing.T, ep *Endpoint) { inv(t, ep.Close()) }},
		{"Put", func(t *testing.T, ep *Endpoint) { inv(t, ep.Put(ctx, s, k).Wait(ctx)) }},
		{"Get", func(t *testing.T, ep *Endpoint) { inv(t, ep.Get(ctx, s, k).Wait(ctx)) }},
		{"PutSync", func(t *testing.T, ep *Endpoint) { inv(t, ep.PutSync(ctx, s, k)) }},
		{"GetSync", func(t *testing.T, ep *Endpoint) { inv(t, ep.GetSync(ctx, s, k)) }},
		{"PutList", func(t *testing.T, ep *Endpoint) {
			inv(t, ep.PutList(ctx, []Slice{s}, []RemoteKey{k}).Wait(ctx))
		}},
		{"GetList", func(t *testing.T, ep *Endpoint) {
			inv(t, ep.GetList(ctx, []Slice{s}, []RemoteKey{k}).Wait(ctx))
		}},
		{"Bind", func(t *testing.T, ep *Endpoint) {
			b, err := ep.Bind(ctx, s, k)
			require.Nil(t, b)
			inv(t, err)
		}},
		{"Send", func(t *testing.T, ep *Endpoint) { inv(t, ep.Send(ctx, []byte("hi"))) }},
		{"Recv", func(t *testing.T, ep *Endpoint) {
			m, err := ep.Recv(ctx)
			require.Nil(t, m)
			inv(t, err)
		}},
		{"TryRecv", func(t *testing.T, ep *Endpoint) {
			m, ok, err := ep.TryRecv()
			require.Nil(t, m)
			require.False(t, ok)
			inv(t, err)
		}},
		{"WaitRecv", func(t *testing.T, ep *Endpoint) { inv(t, ep.WaitRecv(ctx)) }},
	})
}
