package engine

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// TestShmForgedKeyLength: over a unix endpoint the requester maps the
// owner's memory itself, and a key's MAC cannot be checked on its side
// (the owner made it). A key of an allocation already imported that
// claims a larger Length (or another MAC) is refused, whether it comes
// alone, to Bind, or as a later piece of a list sharing the first
// piece's import. Such keys used to reach past the 4 KiB mapping: a
// panic in Bind and in lists, a memmove 512 GiB past it when a peer sent
// one in a request.
func TestShmForgedKeyLength(t *testing.T) {
	ctx := context.Background()
	owner := newEngine(t, Config{Devices: DevicesNone})
	l, err := owner.Listen("unix", filepath.Join(t.TempDir(), "o.sock"))
	require.NoError(t, err)
	dst, _ := owner.Alloc(4096, Host)
	k, err := dst.Export()
	require.NoError(t, err)
	user := newEngine(t, Config{Devices: DevicesNone})
	ep, err := user.Dial(ctx, "unix", l.Addr())
	require.NoError(t, err)
	defer ep.Close()
	src, _ := user.Alloc(4096, Host)
	require.NoError(t, ep.PutSync(ctx, src.Slice(0, 16), k.Slice(0, 16)), "the honest key imports the allocation")

	long := k
	long.k.Length, long.k.GrantLen = 1<<40, 1<<40
	long.k.Offset, long.k.Len = 1<<39, 16
	badMAC := k.View(16, 16)
	badMAC.k.MAC[0] ^= 1
	for _, tc := range []struct {
		name string
		op   func() error
	}{
		{"put", func() error { return ep.PutSync(ctx, src.Slice(0, 16), long) }},
		{"bind", func() error { _, err := ep.Bind(ctx, src.Slice(0, 16), long); return err }},
		{"list, longer", func() error {
			return ep.PutList(ctx, []Slice{src.Slice(0, 16), src.Slice(16, 16)}, []RemoteKey{k.Slice(0, 16), long}).Wait(ctx)
		}},
		{"list, another MAC", func() error {
			return ep.PutList(ctx, []Slice{src.Slice(0, 16), src.Slice(16, 16)}, []RemoteKey{k.View(0, 16), badMAC}).Wait(ctx)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.op(), ErrInvalid)
		})
	}
	require.NoError(t, ep.PutSync(ctx, src.Slice(0, 16), k.Slice(0, 16)), "the honest key still works")
}

// TestShmServeRefusesOversizedLocalKey: a peer's Put or Get names its own
// memory with a key (wire.LocalKey) the owner imports whole: the key's
// Length, which the owner cannot check (the peer signed it), is what the
// owner maps. A peer claiming a 16 TiB allocation (a sparse memfd) for a
// 16-byte request made the owner map 16 TiB: seven such requests at once
// fill the 128 TiB address space (mmap then fails: Go's heap with it), and
// a device copy pins the whole mapping. The owner now refuses a requester's
// key to more than the request copies (an honest peer exports a bounce
// buffer of exactly that size) before asking for any memfd.
func TestShmServeRefusesOversizedLocalKey(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	l, err := e.Listen("unix", filepath.Join(t.TempDir(), "e.sock"))
	require.NoError(t, err)
	host, _ := e.Alloc(4096, Host)
	hk, err := host.Export()
	require.NoError(t, err)
	p := dialRaw(t, l.Addr(), rawHello(uint32(os.Getpid())))
	defer p.c.Close()
	mem, err := ipc.NewShared(16, "requester")
	require.NoError(t, err)
	defer mem.Close()
	copy(mem.Bytes(), "from the peer 16")

	for _, tc := range []struct {
		name   string
		length uint64 // of the requester's allocation
		ok     bool
	}{
		{"16 TiB allocation for 16 bytes", 1 << 44, false},
		{"one byte more than the request", 17, false},
		{"exactly the request", 16, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			local := wire.RemoteKey{Owner: p.hello.EngineID, AllocID: tc.length, Generation: 1, MemType: wire.MemHost, Device: -1,
				Flags: wire.KeyRead | wire.KeyWrite, Length: tc.length, GrantLen: tc.length, Len: 16}
			req := wire.Request{RequestID: tc.length, Key: hk.k, Length: 16, Local: wire.Local{Kind: wire.LocalKey, Key: local}}
			require.NoError(t, p.c.Send(&wire.Put{Request: req}))
			f, m := p.recv(t)
			if !tc.ok {
				require.IsType(t, &wire.Error{}, m, "the owner asked for the memfd of a %d-byte allocation", tc.length)
				require.Equal(t, wire.StatusOutOfRange, m.(*wire.Error).Code)
				return
			}
			ir, ok := m.(*wire.ImportRequest)
			require.True(t, ok, "%T", m)
			require.NoError(t, p.c.Send(&wire.ImportReply{RequestID: ir.RequestID, AllocID: ir.Key.AllocID,
				Generation: ir.Key.Generation, Kind: wire.FDMemfd, Size: 16}, mem.FD(), testValidity(t).FD()))
			_ = f.CloseFDs()
			_, m = p.recv(t)
			require.IsType(t, &wire.Completion{}, m)
			require.Equal(t, "from the peer 16", string(host.Bytes()[:16]))
		})
	}
}

// TestShmImportBeyondMaxBytes: a Put or Get to a peer's host buffer maps
// the whole allocation, whose Length is the owner's word (its key): one
// larger than Config.IPCCache.MaxBytes was mapped anyway, past the bound
// even with nothing else cached, so an owner handing out a key to a
// 16 TiB sparse memfd made each operation on it map 16 TiB (seven at once
// fill the address space; a device copy pins the whole mapping). Such an
// allocation is not mapped now: its owner performs the operation (the
// path of a key granting part of an allocation), and a Binding, which
// needs the mapping, is refused.
func TestShmImportBeyondMaxBytes(t *testing.T) {
	ctx := context.Background()
	owner := newEngine(t, Config{Devices: DevicesNone})
	l, err := owner.Listen("unix", filepath.Join(t.TempDir(), "o.sock"))
	require.NoError(t, err)
	big, err := owner.Alloc(4<<20, Host)
	require.NoError(t, err)
	k, err := big.Export()
	require.NoError(t, err)
	user := newEngine(t, Config{Devices: DevicesNone, IPCCache: RegCacheConfig{MaxBytes: 1 << 20}})
	ep, err := user.Dial(ctx, "unix", l.Addr())
	require.NoError(t, err)
	defer ep.Close()
	src, err := user.Alloc(16, Host)
	require.NoError(t, err)
	copy(src.Bytes(), "beyond max bytes")
	require.NoError(t, ep.PutSync(ctx, src.All(), k.Slice(4<<20-16, 16)))
	require.Equal(t, "beyond max bytes", string(big.Bytes()[4<<20-16:]))
	back, err := user.Alloc(16, Host)
	require.NoError(t, err)
	require.NoError(t, ep.GetSync(ctx, back.All(), k.View(4<<20-16, 16)))
	require.Equal(t, "beyond max bytes", string(back.Bytes()))
	require.NoError(t, ep.PutList(ctx, []Slice{src.All(), src.All()}, []RemoteKey{k.View(0, 16), k.View(16, 16)}).Wait(ctx))
	require.Equal(t, "beyond max bytesbeyond max bytes", string(big.Bytes()[:32]))
	_, err = ep.Bind(ctx, src.All(), k.View(0, 16))
	require.ErrorIs(t, err, ErrNotSupported)
	require.NotErrorIs(t, err, ErrPeer, "the peer did nothing wrong")
	st := user.Stats().IPCCache
	require.Zero(t, st.Misses, "the 4 MiB allocation was imported: %+v", st)
	require.Zero(t, st.Regions)
}
