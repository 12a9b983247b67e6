package engine

import (
	"crypto/rand"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// identity is what an engine tells its peers about itself, and the secret
// its remote keys are signed with.
type identity struct {
	hello  wire.Hello
	epoch  uint64 // generation of every allocation of this engine instance
	signer *wire.Signer
	// conns numbers the engine's endpoints (ipc.PeerID.Conn): the imports
	// of each connection are purged by that connection's teardown only.
	conns *atomic.Uint64
}

func newIdentity() (identity, error) {
	id := identity{conns: new(atomic.Uint64)}
	if _, err := rand.Read(id.hello.EngineID[:]); err != nil {
		return id, fmt.Errorf("gxfer: engine id: %w", err)
	}
	secret, err := wire.NewSecret()
	if err != nil {
		return id, err
	}
	if id.signer, err = wire.NewSigner(secret); err != nil {
		return id, err
	}
	pidns, err := ipc.PIDNamespace()
	if err != nil {
		return id, err
	}
	id.epoch = uint64(time.Now().UnixNano())
	id.hello = wire.Hello{
		MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion,
		Caps:         wire.CapFDPassing | wire.CapSharedHost | wire.CapMessages,
		PID:          uint32(os.Getpid()),
		PIDNamespace: pidns,
		UID:          uint32(os.Getuid()),
		EngineID:     id.hello.EngineID,
		Name:         filepath.Base(os.Args[0]),
	}
	return id, nil
}

// RemoteKey describes a buffer another engine exported: the bytes of
// Buffer.Export, parsed. It grants access to a signed range of the buffer
// only (the whole buffer for the key Export returns; the range of the
// first Slice for the keys sliced from it); the owner checks every
// request against that range and refuses forged or edited keys, a
// re-encoded wider range among them. Slice of a key that already grants
// part of a buffer narrows its view only: the holder of such a key can
// reach the part it was granted, never more. The one exception is RDMA:
// a peer writing or reading with the key's rkey is bounded by the NIC's
// registration (the whole allocation), not by the grant (see Export).
type RemoteKey struct {
	k   wire.RemoteKey
	err error
	// root is the key granting the whole allocation that k was sliced
	// from in this process (nil if none): its holder may map all of it,
	// so Put and Get through a unix socket copy through the mapping. It is
	// never encoded (Bytes encodes k only).
	root *wire.RemoteKey
}

// grantsAll reports whether k grants the whole allocation (it is then
// its own map key).
func (k *RemoteKey) grantsAll() bool { return k.k.GrantOffset == 0 && k.k.GrantLen == k.k.Length }

// mapKey is the key that imports the allocation (one granting all of it)
// and true, or k's own key and false if there is none.
func (k RemoteKey) mapKey() (wire.RemoteKey, bool) {
	switch {
	case k.grantsAll():
		return k.k, true
	case k.root != nil:
		return *k.root, true
	}
	return k.k, false
}

// reqMapKey is a request's datapath.Req.MapKey: the key granting the
// whole allocation when k is a narrower one sliced from it in this process,
// nil else (a key granting all of it is its own map key: the paths map
// with Req.Key then). No copy is made: root is never written once made.
func (k *RemoteKey) reqMapKey() *wire.RemoteKey {
	if k.grantsAll() {
		return nil
	}
	return k.root
}

// ParseRemoteKey parses the bytes of an exported key (untrusted input). A
// key whose view is longer than an int holds is refused (ErrInvalid,
// wrapping wire.ErrMalformed): no buffer is that long.
func ParseRemoteKey(b []byte) (RemoteKey, error) {
	var k wire.RemoteKey
	if err := k.UnmarshalBinary(b); err != nil {
		return RemoteKey{}, newErr(ErrInvalid, "remote key", err)
	}
	if k.Len > math.MaxInt {
		// Well-formed for the wire (uint64), but no buffer is that long and
		// Len (an int) could not say how long it is.
		return RemoteKey{}, newErr(ErrInvalid, "remote key", fmt.Errorf("%w: view of %d bytes", wire.ErrMalformed, k.Len))
	}
	return RemoteKey{k: k}, nil
}

// Bytes encodes the key for sending to a peer. A key with a range error
// (Err) encodes to nil: its key is the one it was sliced from, which
// grants more than the range asked for.
func (k RemoteKey) Bytes() []byte {
	if k.err != nil {
		return nil
	}
	b, _ := k.k.MarshalBinary()
	return b
}

// Len is the length of the key's view.
func (k RemoteKey) Len() int { return int(k.k.Len) }

// Location is where the memory lives at its owner.
func (k RemoteKey) Location() Location {
	if k.k.MemType == wire.MemGaudi {
		return Gaudi(k.k.Device)
	}
	return Host
}

// Err reports a range error made by Slice.
func (k RemoteKey) Err() error { return k.err }

// Slice narrows the key to n bytes at off within its view. Of a key that
// grants the whole buffer (what Export returns) it makes a key that
// grants only that range (signed without the owner's secret, see
// wire.RemoteKey): hand it to a peer that may reach that range only. A
// bad range yields a key whose use fails with ErrInvalid.
func (k RemoteKey) Slice(off, n int) RemoteKey {
	if k.err != nil {
		return k
	}
	if off < 0 || n < 0 {
		return RemoteKey{k: k.k, err: newErr(ErrInvalid, fmt.Sprintf("negative offset or length (%d, %d)", off, n), nil)}
	}
	s, err := k.k.Slice(uint64(off), uint64(n))
	if err != nil {
		return RemoteKey{k: k.k, err: newErr(ErrInvalid, "remote key range", err)}
	}
	root := k.root
	if k.grantsAll() {
		r := k.k
		root = &r
	}
	return RemoteKey{k: s, root: root}
}

// View narrows the key's view to n bytes at off within it, keeping its
// grant: unlike Slice it never derives a narrower grant (no signature to
// compute, so it costs a few comparisons), and the key still grants
// whatever k granted. Use it for keys that go back to their owner only
// (a Put or Get naming part of a buffer); hand a peer a key made by Slice.
// A bad range yields a key whose use fails with ErrInvalid.
func (k RemoteKey) View(off, n int) RemoteKey {
	// The common case checks the range without building an error (Span's
	// closure) and returns the key it was given, narrowed: a list of views
	// (the agent's descriptors) copies each key fewer times.
	if k.err == nil && off >= 0 && n >= 0 {
		if start, ok := k.k.InSpan(uint64(off), uint64(n)); ok {
			k.k.Offset, k.k.Len = start, uint64(n)
			return k
		}
	}
	return k.viewErr(off, n)
}

// viewErr is the key View returns for a bad range.
func (k *RemoteKey) viewErr(off, n int) RemoteKey {
	if k.err != nil {
		return *k
	}
	if off < 0 || n < 0 {
		return RemoteKey{k: k.k, err: newErr(ErrInvalid, fmt.Sprintf("negative offset or length (%d, %d)", off, n), nil)}
	}
	_, err := k.k.Span(uint64(off), uint64(n))
	return RemoteKey{k: k.k, err: newErr(ErrInvalid, "remote key range", err)}
}

// Export returns a remote key for the buffer that peers connected to this
// engine can use with Endpoint.Put and Get. Host memory must come from
// Alloc (it is a sealed memfd the peer maps); Gaudi memory is reached
// through requests to this engine, which performs the DMA. Registered
// caller memory cannot be shared.
//
// With RDMA (Engine.RDMA), the key carries an rkey: host memory is
// registered through the MR cache with remote read and write (kept
// registered until Free), Gaudi memory through its DMA-BUF where the NIC
// supports it. The rkey covers the whole allocation rounded to pages: an
// RDMA peer holding a key narrowed by RemoteKey.Slice can still reach the
// rest of the allocation (the NIC checks the region, not the view).
// Once the engine's Close has begun, Export fails with ErrClosed.
func (b *Buffer) Export() (RemoteKey, error) {
	if b == nil {
		return RemoteKey{}, newErr(ErrInvalid, "export of a nil buffer", nil)
	}
	if b.eng == nil {
		return RemoteKey{}, errNoEngine
	}
	e := b.eng
	// Inside the close gate: Close frees the buffer (telling the
	// transports, which drop its registrations) without waiting for its
	// holds, so an export Close did not wait for would register memory
	// Close released, after the transports' Finish.
	if !e.enter() {
		return RemoteKey{}, ErrClosed
	}
	defer e.exit()
	if err := b.acquire(); err != nil {
		return RemoteKey{}, err
	}
	defer b.release()
	k := wire.RemoteKey{
		Owner: e.ident.hello.EngineID, OwnerPID: e.ident.hello.PID, OwnerPIDNS: e.ident.hello.PIDNamespace,
		AllocID: b.id, Generation: e.ident.epoch, MemType: wire.MemHost, Device: -1,
		Flags: wire.KeyRead | wire.KeyWrite, Base: b.Addr(), Length: b.size, Offset: 0, Len: b.size,
		GrantOffset: 0, GrantLen: b.size,
	}
	switch {
	case b.loc.gaudi:
		k.MemType, k.Device = wire.MemGaudi, b.loc.dev
	case b.shm == nil:
		return RemoteKey{}, newErr(ErrNotSupported, "registered memory cannot be shared; allocate it with Alloc(Host)", nil)
	}
	e.hooksExport(b, &k)
	if err := e.ident.signer.Sign(&k); err != nil {
		return RemoteKey{}, err
	}
	b.exported.Store(true)
	return RemoteKey{k: k}, nil
}
