package rdma_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/gxfer/gxfer/rdma"
)

// A peer's endpoint travels in wire.RDMAConnect (package wire encodes,
// decodes and fuzzes it); Validate is what package rdma checks before it
// connects a queue pair to one.
func TestEndpointValidate(t *testing.T) {
	good := rdma.Endpoint{QPN: 0x123456, PSN: 0xabcdef, LID: 7, MTU: rdma.MTU4096}
	good.GID[0], good.GID[15] = 0xfe, 0x01
	assert.NoError(t, good.Validate())
	mut := func(f func(*rdma.Endpoint)) error {
		e := good
		f(&e)
		return e.Validate()
	}
	assert.ErrorIs(t, mut(func(e *rdma.Endpoint) { e.MTU = 9 }), rdma.ErrInvalid)
	assert.ErrorIs(t, mut(func(e *rdma.Endpoint) { e.QPN = 1 << 24 }), rdma.ErrInvalid)
	assert.ErrorIs(t, mut(func(e *rdma.Endpoint) { e.PSN = 1 << 24 }), rdma.ErrInvalid)
	assert.ErrorIs(t, mut(func(e *rdma.Endpoint) { e.QPN = 0 }), rdma.ErrInvalid)
	assert.ErrorIs(t, mut(func(e *rdma.Endpoint) { e.LID = 0; e.GID = rdma.GID{} }), rdma.ErrInvalid)
}

func TestRemoteMRAt(t *testing.T) {
	r := rdma.RemoteMR{Addr: 0x7f0000001000, Len: 1 << 30, RKey: 0xdeadbeef}
	assert.Equal(t, rdma.RemoteAddr{Addr: r.Addr + 10, RKey: r.RKey}, r.At(10))
}

func TestEndpointText(t *testing.T) {
	e := rdma.Endpoint{QPN: 0x123456, PSN: 0xabcdef, LID: 7, MTU: rdma.MTU4096}
	e.GID[0], e.GID[15] = 0xfe, 0x01
	got, err := parseEndpoint(formatEndpoint(e))
	assert.NoError(t, err)
	assert.Equal(t, e, got)
}
