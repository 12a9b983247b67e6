package rdma_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/rdma"
)

func TestEndpointBinary(t *testing.T) {
	e := rdma.Endpoint{QPN: 0x123456, PSN: 0xabcdef, LID: 7, MTU: rdma.MTU4096}
	e.GID[0], e.GID[15] = 0xfe, 0x01
	b, err := e.MarshalBinary()
	require.NoError(t, err)
	require.Len(t, b, rdma.EndpointSize)
	var got rdma.Endpoint
	require.NoError(t, got.UnmarshalBinary(b))
	assert.Equal(t, e, got)

	bad := func(mut func([]byte)) error {
		c := append([]byte(nil), b...)
		mut(c)
		var x rdma.Endpoint
		return x.UnmarshalBinary(c)
	}
	assert.ErrorIs(t, bad(func(c []byte) { c[0] = 2 }), rdma.ErrInvalid)                     // version
	assert.ErrorIs(t, bad(func(c []byte) { c[1] = 9 }), rdma.ErrInvalid)                     // MTU
	assert.ErrorIs(t, bad(func(c []byte) { c[4] = 1 }), rdma.ErrInvalid)                     // QPN > 24 bits
	assert.ErrorIs(t, bad(func(c []byte) { c[8] = 1 }), rdma.ErrInvalid)                     // PSN > 24 bits
	assert.ErrorIs(t, bad(func(c []byte) { clear(c[4:8]) }), rdma.ErrInvalid)                // QPN 0
	assert.ErrorIs(t, bad(func(c []byte) { clear(c[2:4]); clear(c[12:]) }), rdma.ErrInvalid) // no GID, no LID
	var x rdma.Endpoint
	assert.ErrorIs(t, x.UnmarshalBinary(b[:27]), rdma.ErrInvalid)
	assert.Equal(t, rdma.Endpoint{}, x, "a failed decode leaves the value alone")
}

func TestRemoteMRBinary(t *testing.T) {
	r := rdma.RemoteMR{Addr: 0x7f0000001000, Len: 1 << 30, RKey: 0xdeadbeef}
	b, err := r.MarshalBinary()
	require.NoError(t, err)
	require.Len(t, b, rdma.RemoteMRSize)
	var got rdma.RemoteMR
	require.NoError(t, got.UnmarshalBinary(b))
	assert.Equal(t, r, got)
	assert.Equal(t, rdma.RemoteAddr{Addr: r.Addr + 10, RKey: r.RKey}, r.At(10))

	wrap := rdma.RemoteMR{Addr: ^uint64(0) - 1, Len: 4}
	b, _ = wrap.MarshalBinary()
	assert.ErrorIs(t, got.UnmarshalBinary(b), rdma.ErrInvalid)
	b, _ = r.MarshalBinary()
	b[0] = 9
	assert.ErrorIs(t, got.UnmarshalBinary(b), rdma.ErrInvalid)
	assert.ErrorIs(t, got.UnmarshalBinary(b[:3]), rdma.ErrInvalid)
}

// FuzzUnmarshal: a peer's bytes are untrusted; decoding never panics and a
// decoded value re-encodes to the same bytes.
func FuzzUnmarshal(f *testing.F) {
	e, _ := rdma.Endpoint{QPN: 17, PSN: 3, LID: 1, MTU: rdma.MTU1024}.MarshalBinary()
	r, _ := rdma.RemoteMR{Addr: 4096, Len: 8192, RKey: 5}.MarshalBinary()
	f.Add(e)
	f.Add(r)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var ep rdma.Endpoint
		if ep.UnmarshalBinary(b) == nil {
			out, _ := ep.MarshalBinary()
			require.Equal(t, b, out)
		}
		var mr rdma.RemoteMR
		if mr.UnmarshalBinary(b) == nil {
			out, _ := mr.MarshalBinary()
			require.Equal(t, b, out)
		}
	})
}
