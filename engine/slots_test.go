package engine

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/ctrlchan"
	"github.com/gxfer/gxfer/wire"
)

// TestHostileClientRefused: the requester-side bound on requests in
// progress is a courtesy of well-behaved peers; a raw client that sends
// more than MaxServing requests the owner serves at once, and MaxServing
// more waiting in its backlog, still has the ones beyond refused with
// StatusNoResources (here the first 64 are held in progress by
// ImportRequests the client does not answer yet).
func TestHostileClientRefused(t *testing.T) {
	e := newEngine(t, Config{Emulator: EmulatorConfig{DRAMSize: 256 << 20}})
	l, err := e.Listen("unix", filepath.Join(t.TempDir(), "e.sock"))
	require.NoError(t, err)
	dev, _ := e.Alloc(1<<20, Gaudi(0))
	dk, err := dev.Export()
	require.NoError(t, err)
	a := dialRaw(t, l.Addr(), rawHello(uint32(os.Getpid())))
	defer a.c.Close()
	const n = 2*ctrlchan.MaxServing + 1
	for i := range n {
		local := wire.RemoteKey{Owner: a.hello.EngineID, AllocID: uint64(1000 + i), Generation: 1,
			MemType: wire.MemHost, Device: -1, Flags: wire.KeyRead | wire.KeyWrite, Length: 4096, GrantLen: 4096, Len: 4096}
		req := wire.Request{RequestID: uint64(2*i + 1), Key: dk.k, Offset: uint64(i) * 4096, Length: 4096,
			Local: wire.Local{Kind: wire.LocalKey, Key: local}}
		require.NoError(t, a.c.Send(&wire.Put{Request: req}))
	}
	var imports []*wire.ImportRequest
	refused := 0
	for refused == 0 {
		_, m := a.recv(t)
		switch m := m.(type) {
		case *wire.ImportRequest: // held: the request stays in progress
			imports = append(imports, m)
		case *wire.Error:
			require.Equal(t, wire.StatusNoResources, m.Code, "%v", m)
			refused++
		case *wire.Completion:
			t.Fatalf("request %d completed while its import was unanswered", m.RequestID)
		}
	}
	require.LessOrEqual(t, len(imports), ctrlchan.MaxServing)
}
