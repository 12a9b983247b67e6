package shm

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// errCompleter records each element's outcome.
type errCompleter struct {
	mu   sync.Mutex
	errs map[int]error
}

func (c *errCompleter) Complete(i int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.errs == nil {
		c.errs = map[int]error{}
	}
	if _, done := c.errs[i]; !done {
		c.errs[i] = err
	}
}

func (c *errCompleter) CompleteAll(err error) { c.Complete(0, err) }

func (c *errCompleter) get(t *testing.T, i int) error {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	err, ok := c.errs[i]
	require.True(t, ok, "element %d not completed", i)
	return err
}

// A copy through a mapping of a peer's memory that its owner revoked
// fails: ErrInvalid (a stale key, the caller's to fix) when the owner
// freed the buffer, but ErrPeer when the owner's engine closed, which
// revokes every flag once its endpoints said Bye: our reader may not
// have read the Bye yet (the endpoint is up), and the caller could not
// tell the peer leaving from a bug of its own. Every check of the flag
// says the same: a Put or Get (rmaMapped), a list piece (StartList), a
// binding before and after its copy.
func TestStaleKeyOfClosingOwnerIsPeerError(t *testing.T) {
	sites := []struct {
		name string
		run  func(t *testing.T, p *Path, h *ipc.Handle[*imported], k wire.RemoteKey) error
	}{
		{"put", func(t *testing.T, p *Path, _ *ipc.Handle[*imported], k wire.RemoteKey) error {
			var c errCompleter
			p.Start(context.Background(), datapath.Req{Put: true, Local: datapath.Mem{B: &fakeBuf{id: 1}, Len: k.Len}, Key: k}, &c)
			return c.get(t, 0)
		}},
		{"list", func(t *testing.T, p *Path, _ *ipc.Handle[*imported], k wire.RemoteKey) error {
			var c errCompleter
			p.StartList(context.Background(), []datapath.Req{{Put: true, Local: datapath.Mem{B: &fakeBuf{id: 1}, Len: k.Len}, Key: k}}, &c)
			return c.get(t, 0)
		}},
		{"binding", func(_ *testing.T, p *Path, h *ipc.Handle[*imported], _ wire.RemoteKey) error {
			return (&bound{p: p, h: h}).check()
		}},
		{"binding after its copy", func(_ *testing.T, p *Path, h *ipc.Handle[*imported], _ wire.RemoteKey) error {
			return (&bound{p: p, h: h}).checkAfter()
		}},
	}
	for _, tc := range []struct {
		name        string
		ownerClosed bool // else the owner freed the buffer
		kind, not   error
	}{
		{"owner freed the buffer", false, gxerr.Invalid, gxerr.Peer},
		{"owner closed", true, gxerr.Peer, gxerr.Invalid},
	} {
		for _, site := range sites {
			t.Run(tc.name+"/"+site.name, func(t *testing.T) {
				// The owner lends a buffer; the importer maps its flag.
				owner, op, _, _ := newTestPath()
				ownerClosed := false
				defer func() {
					if !ownerClosed {
						require.NoError(t, owner.Close())
					}
				}()
				b := &fakeBuf{id: 7}
				require.NoError(t, b.Acquire())
				v, err := op.lend(b, 1)
				require.NoError(t, err)
				b.Release()
				view, err := ipc.MapValidity(v.FD())
				require.NoError(t, err)

				tr, p, _, env := newTestPath()
				k := wire.RemoteKey{AllocID: 7, Generation: 1, MemType: wire.MemHost, Length: 4096, GrantLen: 4096, Len: 4096}
				h, err := tr.imports.Get(ipc.Key{Peer: p.pid, AllocID: 7, Generation: 1}, func(ipc.Key) (*imported, uint64, error) {
					return &imported{valid: view, buf: &fakeBuf{id: 9}}, 4096, nil
				})
				require.NoError(t, err)

				if tc.ownerClosed {
					require.NoError(t, owner.Close()) // the engine's Close: its endpoints are closed
					ownerClosed = true
				} else {
					b.freed.Store(true)
					owner.Revoke(b)
				}
				err = site.run(t, p, h, k)
				require.ErrorIs(t, err, tc.kind)
				require.NotErrorIs(t, err, tc.not)

				tr.imports.Put(h)
				require.NoError(t, tr.Close())
				require.NoError(t, view.Close())
				env.wg.Wait()
			})
		}
	}
}
