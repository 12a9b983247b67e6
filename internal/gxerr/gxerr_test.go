package gxerr

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func TestNew(t *testing.T) {
	err := New(Peer, "peer \"x\": send", io.ErrClosedPipe)
	require.ErrorIs(t, err, Peer)
	require.ErrorIs(t, err, io.ErrClosedPipe)
	require.Equal(t, "gxfer: peer error: peer \"x\": send: io: read/write on closed pipe", err.Error())
	require.Equal(t, "gxfer: invalid argument", New(Invalid, "", nil).Error())
}

func TestCtx(t *testing.T) {
	cases := []struct {
		in   error
		kind error
	}{
		{context.Canceled, Canceled},
		{context.DeadlineExceeded, Timeout},
	}
	for _, c := range cases {
		err := Ctx("waiting", c.in)
		require.ErrorIs(t, err, c.kind)
		require.ErrorIs(t, err, c.in)
	}
	other := errors.New("other")
	require.Same(t, other, Ctx("waiting", other), "other errors pass through")
}
