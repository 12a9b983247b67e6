package shm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
)

// importErr gives each failure of an import its kind. An import whose
// context was canceled (the caller canceled its Put, Get or Bind during
// the round trip to the owner) is ErrCanceled: it was reported as a peer
// error (issue 17: every context honoured, with its typed error).
func TestImportErr(t *testing.T) {
	live := gxerr.New(gxerr.Peer, "connection lost", nil)
	for _, tc := range []struct {
		name   string
		err    error
		failed error // the endpoint's failure (nil: up)
		kind   error
	}{
		{"canceled", fmt.Errorf("import: %w", context.Canceled), nil, gxerr.Canceled},
		{"deadline", &ipc.ImportError{Err: context.DeadlineExceeded}, nil, gxerr.Timeout},
		{"typed timeout", gxerr.New(gxerr.Timeout, "x", nil), nil, gxerr.Timeout},
		{"refused", gxerr.New(gxerr.Invalid, "x", nil), nil, gxerr.Invalid},
		{"cache closed", ipc.ErrClosed, nil, gxerr.Closed},
		{"stale", ipc.ErrStale, nil, gxerr.Invalid},
		{"stale, endpoint failed", ipc.ErrStale, live, gxerr.Peer},
		{"other", errors.New("mmap failed"), nil, gxerr.Peer},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, p, c, _ := newTestPath()
			defer tr.Close()
			if tc.failed != nil {
				c.fail(tc.failed)
			}
			require.ErrorIs(t, p.importErr(tc.err), tc.kind)
		})
	}
}

// Soak 20261124 (put/unix/gaudi->host): an import whose reply arrived
// while the endpoint was failing came back from the handle cache as
// "ipc: stale handle: peer N purged" (the endpoint's teardown purged the
// loading entry), and importErr reported it as ErrInvalid "stale key":
// the key was valid, the peer had gone. It must be the endpoint's error.
func TestRegressImportPurgedByEndpointFailureIsPeerError(t *testing.T) {
	for _, tc := range []struct {
		name string
		why  error
		kind error
	}{
		{"peer lost", gxerr.New(gxerr.Peer, "test: connection lost", nil), gxerr.Peer},
		{"closed", gxerr.New(gxerr.Closed, "endpoint closed", nil), gxerr.Closed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, p, c, env := newTestPath()
			key := ipc.Key{Peer: p.pid, AllocID: 1, Generation: 1}
			// The import succeeds, but the endpoint fails (and purges its
			// imports) before the importer returns: the exact interleaving.
			_, err := tr.imports.Get(key, func(ipc.Key) (*imported, uint64, error) {
				c.fail(tc.why)
				p.Failed(tc.why)
				return &imported{buf: &fakeBuf{id: 9}}, 4096, nil
			})
			require.ErrorIs(t, err, ipc.ErrStale)
			err = p.importErr(err)
			require.ErrorIs(t, err, tc.kind)
			require.NotErrorIs(t, err, gxerr.Invalid)
			require.NoError(t, tr.Close())
			require.EqualValues(t, 1, env.freed.Load(), "the purged import is released")
		})
	}
}

// readFlag maps a validity flag as a peer does and reads it.
func readFlag(t *testing.T, v *ipc.Validity) bool {
	t.Helper()
	mem, err := unix.Mmap(v.FD().Int(), 0, os.Getpagesize(), unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	defer func() { require.NoError(t, unix.Munmap(mem)) }()
	return *(*uint64)(unsafe.Pointer(&mem[0])) != 0
}

// A buffer's validity flag is revoked by Free whether Free runs before
// the first import made the flag (lend finds the buffer freed) or after
// (Revoke finds the flag); Freeing forgets the importers and releases
// the flag; an ended endpoint lends no more and is forgotten.
func TestLendRevoke(t *testing.T) {
	for _, tc := range []struct {
		name        string
		freedBefore bool // Free ran before the import made the flag
	}{
		{"free after import", false},
		{"free during import", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, p, c, env := newTestPath()
			defer tr.Close()
			b := &fakeBuf{id: 3}
			require.NoError(t, b.Acquire()) // serveImport's reference
			if tc.freedBefore {
				b.freed.Store(true)
				tr.Revoke(b) // finds no flag
			}
			v, err := p.lend(b, 77)
			require.NoError(t, err)
			require.Equal(t, 1, Importers(b))
			if !tc.freedBefore {
				require.False(t, readFlag(t, v))
				b.freed.Store(true)
				tr.Revoke(b)
			}
			require.True(t, readFlag(t, v), "a peer's copy after Free is not refused as stale")
			b.Release()
			require.Zero(t, b.refs.Load())

			c.fail(gxerr.New(gxerr.Peer, "gone", nil)) // Freeing sends the fake no Invalidate
			require.NoError(t, tr.Freeing(b))
			require.Zero(t, Importers(b))
			p.mu.Lock()
			require.Empty(t, p.lent)
			p.mu.Unlock()
			_, held := tr.validity.Load(b)
			require.False(t, held, "the flag is released with the buffer")
			env.wg.Wait() // the Invalidate broadcast
		})
	}
}

// An endpoint that ended is forgotten by the buffers its peer mapped, and
// lends no more.
func TestUnlend(t *testing.T) {
	tr, p, c, _ := newTestPath()
	defer tr.Close()
	b := &fakeBuf{id: 4}
	require.NoError(t, b.Acquire())
	defer b.Release()
	_, err := p.lend(b, 1)
	require.NoError(t, err)
	require.Equal(t, 1, Importers(b))
	why := gxerr.New(gxerr.Peer, "gone", nil)
	c.fail(why)
	p.Failed(why)
	require.Zero(t, Importers(b))
	_, err = p.lend(b, 1)
	require.ErrorIs(t, err, gxerr.Peer)
	require.NoError(t, tr.Freeing(b))
}
