package etcdmeta

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
)

// TestInvalidCalls: a call the store cannot carry out as asked (no
// endpoints, a nil ctx, a second agent's name) fails with ErrInvalid, at
// once. Before, Open without endpoints and Publish of a second name
// returned untyped errors, and a nil ctx panicked in context.WithTimeout.
func TestInvalidCalls(t *testing.T) {
	srv := etcdtest.New(t)
	s := open(t, srv, 0)
	ctx := ctxT(t)
	require.NoError(t, s.Publish(ctx, record("first", 1, 1)))
	var nilCtx context.Context
	cases := []struct {
		name string
		call func() error
	}{
		{"Open without endpoints", func() error { _, err := Open(ctx, Config{}); return err }},
		{"Open with a nil ctx", func() error { _, err := Open(nilCtx, Config{Endpoints: srv.Endpoints()}); return err }},
		{"Publish of a second name", func() error { return s.Publish(ctx, record("second", 1, 1)) }},
		{"Publish with a nil ctx", func() error { return s.Publish(nilCtx, record("first", 1, 2)) }},
		{"Lookup with a nil ctx", func() error { _, err := s.Lookup(nilCtx, "first"); return err }},
		{"List with a nil ctx", func() error { _, err := s.List(nilCtx); return err }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			require.NotPanics(t, func() { err = tc.call() })
			require.ErrorIs(t, err, ErrInvalid)
		})
	}
}
