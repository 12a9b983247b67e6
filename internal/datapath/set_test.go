package datapath_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/dptest"
	"github.com/gxfer/gxfer/internal/testutil"
	"github.com/gxfer/gxfer/wire"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// transport records the calls a Set makes.
type transport struct {
	kind                                datapath.Kind
	closed, finished, exp, rev, freeing int
	err                                 error
}

func (t *transport) Kind() datapath.Kind { return t.kind }
func (t *transport) Connect(context.Context, datapath.Ctrl) (datapath.Path, error) {
	return nil, nil
}
func (t *transport) Close() error { t.closed++; return t.err }

// hooked is a transport with buffer hooks and a Finish.
type hooked struct{ transport }

func (t *hooked) Finish() error                            { t.finished++; return nil }
func (t *hooked) Export(_ datapath.Buf, k *wire.RemoteKey) { t.exp++; k.RKey = 42 }
func (t *hooked) Revoke(datapath.Buf)                      { t.rev++ }
func (t *hooked) Freeing(datapath.Buf) error               { t.freeing++; return t.err }

// TestSet: one transport per kind (a later registration replaces), the
// buffer events reach the hooked ones only, errors are joined.
func TestSet(t *testing.T) {
	var s datapath.Set
	require.Nil(t, s.Get(datapath.KindTCP))
	require.NoError(t, s.Close())
	plain := &transport{kind: datapath.KindTCP, err: errors.New("tcp close")}
	h := &hooked{transport{kind: datapath.KindRDMA, err: errors.New("rdma")}}
	s.Register(&transport{kind: datapath.KindTCP})
	s.Register(plain)
	s.Register(h)
	require.Same(t, plain, s.Get(datapath.KindTCP))
	require.Same(t, h, s.Get(datapath.KindRDMA))
	b := (&dptest.Env{}).NewBuf(8, false)
	var k wire.RemoteKey
	s.Export(b, &k)
	s.Revoke(b)
	require.ErrorIs(t, s.Freeing(b), h.err)
	require.Equal(t, uint32(42), k.RKey)
	require.Equal(t, [3]int{1, 1, 1}, [3]int{h.exp, h.rev, h.freeing})
	err := s.Close()
	require.ErrorIs(t, err, plain.err)
	require.ErrorIs(t, err, h.err)
	require.NoError(t, s.Finish())
	require.Equal(t, 1, plain.closed)
	require.Equal(t, 1, h.finished)
}

// TestSetReplaceDropsHooks: a transport replaced by a later registration
// of its kind gets no more buffer events; they used to reach both.
func TestSetReplaceDropsHooks(t *testing.T) {
	var s datapath.Set
	old := &hooked{transport{kind: datapath.KindRDMA}}
	now := &hooked{transport{kind: datapath.KindRDMA}}
	s.Register(old)
	s.Register(&transport{kind: datapath.KindTCP})
	s.Register(now)
	b := (&dptest.Env{}).NewBuf(8, false)
	var k wire.RemoteKey
	s.Export(b, &k)
	s.Revoke(b)
	require.NoError(t, s.Freeing(b))
	require.Equal(t, [3]int{0, 0, 0}, [3]int{old.exp, old.rev, old.freeing}, "the replaced transport")
	require.Equal(t, [3]int{1, 1, 1}, [3]int{now.exp, now.rev, now.freeing})
}
