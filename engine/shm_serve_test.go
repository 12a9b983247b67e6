package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// TestShmServeFreedDuringImportIsStale: a peer's request whose buffer its
// owner frees while the owner imports the requester's memory (after the
// key was looked up, before the copy) is refused as stale, the status of
// a key whose buffer is gone, not as an internal failure of the owner.
func TestShmServeFreedDuringImportIsStale(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	l, err := e.Listen("unix", filepath.Join(t.TempDir(), "e.sock"))
	require.NoError(t, err)
	buf, err := e.Alloc(4096, Host)
	require.NoError(t, err)
	ek, err := buf.Export()
	require.NoError(t, err)

	a := dialRaw(t, l.Addr(), rawHello(uint32(os.Getpid())))
	defer a.c.Close()
	mine, err := ipc.NewShared(4096, "requester")
	require.NoError(t, err)
	defer mine.Close()
	local := wire.RemoteKey{Owner: a.hello.EngineID, AllocID: 1, Generation: 1, MemType: wire.MemHost, Device: -1,
		Flags: wire.KeyRead | wire.KeyWrite, Length: 4096, GrantLen: 4096, Len: 4096}
	req := wire.Request{RequestID: 1, Key: ek.k, Length: 4096, Local: wire.Local{Kind: wire.LocalKey, Key: local}}
	require.NoError(t, a.c.Send(&wire.Put{Request: req}))
	_, m := a.recv(t)
	ir, ok := m.(*wire.ImportRequest)
	require.True(t, ok, "%T", m)
	require.NoError(t, buf.Free()) // the key was looked up; the owner frees its buffer
	require.NoError(t, a.c.Send(&wire.ImportReply{RequestID: ir.RequestID, AllocID: 1, Generation: 1,
		Kind: wire.FDMemfd, Size: 4096}, mine.FD(), testValidity(t).FD()))
	_, m = a.recv(t)
	werr, ok := m.(*wire.Error)
	require.True(t, ok, "%T %+v", m, m)
	require.Equal(t, wire.StatusStale, werr.Code, "%v", werr)
}
