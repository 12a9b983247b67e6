package wire

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"math"
	"sync"
)

// KeyVersion is the RemoteKey encoding version; keys of other versions are
// refused with ErrMalformed.
const KeyVersion = 3

// KeySize is the size of an encoded RemoteKey.
const KeySize = 128

// Offsets of the encoded key: bytes [0, keySigned) are covered by the MAC.
const (
	keyAlloc  = 80 // the allocation part: the root MAC covers [0, keyAlloc)
	keySigned = 96 // with the grant
	keyMAC    = 96
	keyView   = 112
)

// MACSize is the size of a RemoteKey's MAC.
const MACSize = 16

// MinSecretLen is the shortest secret Sign, Verify and NewSigner accept.
const MinSecretLen = 16

// EngineID identifies one engine instance (random, chosen at start).
type EngineID [16]byte

func (id EngineID) String() string { return hex.EncodeToString(id[:]) }

// MemType says what kind of memory a key describes.
type MemType uint8

// Memory types.
const (
	MemHost  MemType = 1 // host memory (shared with local peers as a memfd)
	MemGaudi MemType = 2 // Gaudi device memory (HBM)
)

func (m MemType) String() string {
	switch m {
	case MemHost:
		return "host"
	case MemGaudi:
		return "gaudi"
	}
	return fmt.Sprintf("MemType(%d)", uint8(m))
}

// KeyFlags are the accesses a key grants.
type KeyFlags uint16

// Key flags.
const (
	KeyRead  KeyFlags = 1 << 0 // peers may read (Get from this memory)
	KeyWrite KeyFlags = 1 << 1 // peers may write (Put into this memory)

	keyFlagsKnown = KeyRead | KeyWrite
)

// MaxNICs is the most NICs a key carries an rkey for (RKey and
// NICRKeys).
const MaxNICs = 3

// MaxDevice is the highest device index a key can carry.
const MaxDevice = 0xFFFE

// RemoteKey is the bytes Buffer.Export returns: a capability naming one
// allocation of one engine, and the range of it that the key grants, which
// the owning engine signs and later verifies. A holder addresses the
// memory through the key's view, a range of the grant.
//
// Encoding (KeySize bytes, little-endian):
//
//	off size field
//	  0    1 version      KeyVersion
//	  1    1 MemType
//	  2    2 Flags        access granted (KeyRead, KeyWrite)
//	  4    2 Device       Gaudi index; 0xFFFF for host memory (Device -1)
//	  6    2 reserved     0
//	  8    4 OwnerPID
//	 12    4 RKey         RDMA remote key of the allocation (0 if none)
//	 16   16 Owner        EngineID
//	 32    8 OwnerPIDNS   inode of the owner's /proc/self/ns/pid
//	 40    8 AllocID
//	 48    8 Generation
//	 56    8 Base         owner's address of the allocation (host VA or device VA)
//	 64    8 Length       allocation length
//	 72    4 NICRKeys[0] rkey of the allocation on the owner's second NIC (0 if none)
//	 76    4 NICRKeys[1] rkey on the owner's third NIC (0 if none)
//	 80    8 GrantOffset  start of the granted range, relative to Base (signed)
//	 88    8 GrantLen     length of the granted range (signed)
//	 96   16 MAC          see below
//	112    8 Offset       view start, relative to Base (not signed)
//	120    8 Len          view length (not signed)
//
// Signing and slicing. A key grants the range [GrantOffset, +GrantLen) of
// its allocation, and nothing else: the owner refuses every request
// outside it. Let R = HMAC-SHA256(secret, bytes 0..79) truncated to 16
// bytes, the root MAC of the allocation. A key granting the whole
// allocation (a root key: what Buffer.Export returns) carries MAC = R. A
// key granting less carries MAC = HMAC-SHA256(R, "gxfer-grant" || bytes
// 0..95) truncated: whoever holds a root key (and so R) can derive a key
// for any range without the owner's secret, but the holder of a narrower
// key cannot widen it, because it would need R, which its key does not
// contain. [RemoteKey.Slice] of a root key therefore makes a narrower
// grant; Slice of a key that is already narrower only narrows its view
// within the unchanged grant (a holder may widen such a view back to the
// grant, never beyond). The owner verifies the MAC ([Verify]) and checks
// every request against the view and the view against the signed grant
// ([RemoteKey.Check], [RemoteKey.Span]).
//
// RDMA: a key's rkeys are the NIC's own capability, covering the whole
// registered allocation; the NIC does not know the grant. The owner
// enforces grants on every request it serves (unix socket, TCP, delegated
// RDMA); an RDMA peer writing directly with an rkey is limited only by
// the NIC. Engines that must confine RDMA peers to a grant should not
// offer RDMA to them.
//
// Generation distinguishes successive uses of the same AllocID by the
// owner; it must increase each time the owner reuses an AllocID.
type RemoteKey struct {
	Owner      EngineID
	OwnerPID   uint32
	OwnerPIDNS uint64
	AllocID    uint64
	Generation uint64
	MemType    MemType
	Device     int // Gaudi device index (0..MaxDevice); -1 for host memory
	Flags      KeyFlags
	Base       uint64
	Length     uint64
	RKey       uint32
	// NICRKeys are the allocation's rkeys on the owner's second and third
	// NICs (0 where it is not registered), for transfers sliced over
	// several NICs: a peer's queue pair connected to the owner's NIC i+1
	// uses NICRKeys[i], one connected to its first NIC uses RKey.
	NICRKeys [MaxNICs - 1]uint32
	// GrantOffset and GrantLen are the signed range the key grants,
	// relative to Base.
	GrantOffset uint64
	GrantLen    uint64
	MAC         [MACSize]byte

	Offset uint64 // view start within the allocation (inside the grant)
	Len    uint64 // view length
}

// root reports whether k grants its whole allocation (its MAC is then
// the allocation's root MAC).
func (k *RemoteKey) root() bool { return k.GrantOffset == 0 && k.GrantLen == k.Length }

// Type returns TypeRemoteKey: a RemoteKey is also a message, with which an
// engine hands a key to a peer.
func (k *RemoteKey) Type() Type        { return TypeRemoteKey }
func (k *RemoteKey) requestID() uint64 { return 0 }

// validate checks the structural rules every encoded key satisfies.
func (k *RemoteKey) validate() error {
	if err := k.validateSigned(); err != nil {
		return err
	}
	if k.Len == 0 || k.Offset < k.GrantOffset || k.Offset-k.GrantOffset > k.GrantLen || k.Len > k.GrantLen-(k.Offset-k.GrantOffset) {
		return fmt.Errorf("view [%d, +%d) outside the grant [%d, +%d)", k.Offset, k.Len, k.GrantOffset, k.GrantLen)
	}
	return nil
}

// validateSigned checks the signed part of the key.
func (k *RemoteKey) validateSigned() error {
	switch k.MemType {
	case MemHost:
		if k.Device != -1 {
			return fmt.Errorf("host key with device %d (want -1)", k.Device)
		}
	case MemGaudi:
		if k.Device < 0 || k.Device > MaxDevice {
			return fmt.Errorf("device %d out of range", k.Device)
		}
	default:
		return fmt.Errorf("unknown memory type %d", uint8(k.MemType))
	}
	if k.Flags&^keyFlagsKnown != 0 || k.Flags == 0 {
		return fmt.Errorf("bad access flags %#x", uint16(k.Flags))
	}
	if k.Length == 0 {
		return fmt.Errorf("zero-length allocation")
	}
	if k.Base > math.MaxUint64-k.Length {
		return fmt.Errorf("allocation [%#x, +%d) wraps around", k.Base, k.Length)
	}
	if k.GrantLen == 0 || k.GrantOffset > k.Length || k.GrantLen > k.Length-k.GrantOffset {
		return fmt.Errorf("grant [%d, +%d) outside the %d-byte allocation", k.GrantOffset, k.GrantLen, k.Length)
	}
	return nil
}

// appendSigned appends the signed part of the encoding (bytes 0..95: the
// allocation, then the grant). The key must be valid.
func (k *RemoteKey) appendSigned(b []byte) []byte {
	dev := uint16(0xFFFF)
	if k.MemType == MemGaudi {
		dev = uint16(k.Device)
	}
	b = append(b, KeyVersion, byte(k.MemType))
	b = appendU16(b, uint16(k.Flags))
	b = appendU16(b, dev)
	b = appendU16(b, 0)
	b = appendU32(b, k.OwnerPID)
	b = appendU32(b, k.RKey)
	b = append(b, k.Owner[:]...)
	b = appendU64(b, k.OwnerPIDNS)
	b = appendU64(b, k.AllocID)
	b = appendU64(b, k.Generation)
	b = appendU64(b, k.Base)
	b = appendU64(b, k.Length)
	for _, r := range k.NICRKeys {
		b = appendU32(b, r)
	}
	b = appendU64(b, k.GrantOffset)
	return appendU64(b, k.GrantLen)
}

// AppendBinary appends the KeySize-byte encoding of k to b. It fails with
// ErrInvalid if the key is not valid (unknown memory type or flags, empty or
// wrapping allocation, view outside it).
func (k *RemoteKey) AppendBinary(b []byte) ([]byte, error) {
	if err := k.validate(); err != nil {
		return b, invalid("remote key: %v", err)
	}
	b = k.appendSigned(b)
	b = append(b, k.MAC[:]...)
	b = appendU64(b, k.Offset)
	return appendU64(b, k.Len), nil
}

// MarshalBinary returns the KeySize-byte encoding of k.
func (k *RemoteKey) MarshalBinary() ([]byte, error) {
	return k.AppendBinary(make([]byte, 0, KeySize))
}

// AppendPayload is AppendBinary (the RemoteKey message's payload is the
// key).
func (k *RemoteKey) AppendPayload(b []byte) ([]byte, error) { return k.AppendBinary(b) }

// UnmarshalBinary decodes and validates an encoded key: exactly KeySize
// bytes, known version, memory type and flags, reserved bytes zero, a
// non-empty allocation that does not wrap, and a non-empty view inside it.
// It does not verify the MAC (only the owner can: see [Verify]). On error k
// is unchanged.
func (k *RemoteKey) UnmarshalBinary(b []byte) error {
	if len(b) != KeySize {
		return malformed("remote key: %d bytes, want %d", len(b), KeySize)
	}
	d := dec{b: b}
	return k.decode(&d)
}

func (k *RemoteKey) decode(d *dec) error {
	p := d.take(KeySize)
	if p == nil {
		return malformed("remote key: truncated")
	}
	if p[0] != KeyVersion {
		return malformed("remote key: version %d (want %d)", p[0], KeyVersion)
	}
	var nk RemoteKey
	nk.MemType = MemType(p[1])
	nk.Flags = KeyFlags(binary.LittleEndian.Uint16(p[2:]))
	dev := binary.LittleEndian.Uint16(p[4:])
	if r := binary.LittleEndian.Uint16(p[6:]); r != 0 {
		return malformed("remote key: reserved field %#04x", r)
	}
	switch {
	case nk.MemType == MemGaudi && dev != 0xFFFF:
		nk.Device = int(dev)
	case nk.MemType == MemHost && dev == 0xFFFF:
		nk.Device = -1
	default:
		return malformed("remote key: memory type %d with device %#04x", p[1], dev)
	}
	nk.OwnerPID = binary.LittleEndian.Uint32(p[8:])
	nk.RKey = binary.LittleEndian.Uint32(p[12:])
	copy(nk.Owner[:], p[16:32])
	nk.OwnerPIDNS = binary.LittleEndian.Uint64(p[32:])
	nk.AllocID = binary.LittleEndian.Uint64(p[40:])
	nk.Generation = binary.LittleEndian.Uint64(p[48:])
	nk.Base = binary.LittleEndian.Uint64(p[56:])
	nk.Length = binary.LittleEndian.Uint64(p[64:])
	for i := range nk.NICRKeys {
		nk.NICRKeys[i] = binary.LittleEndian.Uint32(p[72+4*i:])
	}
	nk.GrantOffset = binary.LittleEndian.Uint64(p[keyAlloc:])
	nk.GrantLen = binary.LittleEndian.Uint64(p[keyAlloc+8:])
	copy(nk.MAC[:], p[keyMAC:keyView])
	nk.Offset = binary.LittleEndian.Uint64(p[keyView:])
	nk.Len = binary.LittleEndian.Uint64(p[keyView+8:])
	if err := nk.validate(); err != nil {
		return malformed("remote key: %v", err)
	}
	*k = nk
	return nil
}

// DecodePayload decodes a RemoteKey message.
func (k *RemoteKey) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeRemoteKey, p); err != nil {
		return err
	}
	return k.UnmarshalBinary(p)
}

// Slice returns a key whose view is [off, off+n) of k's view. It fails with
// ErrOutOfRange if that is empty or not inside k's view. Of a root key
// (one granting its whole allocation) it makes a key granting only the
// new view, with a MAC derived from k's (see [RemoteKey]); of a narrower
// key, it narrows the view within k's grant. A range equal to the whole
// allocation leaves a root key as it is.
func (k RemoteKey) Slice(off, n uint64) (RemoteKey, error) {
	start, err := k.Span(off, n)
	if err != nil {
		return RemoteKey{}, err
	}
	k.Offset, k.Len = start, n
	if k.root() && (start != 0 || n != k.Length) {
		rootMAC := k.MAC
		k.GrantOffset, k.GrantLen = start, n
		deriveMAC(&rootMAC, &k, &k.MAC)
	}
	return k, nil
}

// deriveMAC sets out to the MAC of a key granting less than its
// allocation: HMAC-SHA256 under the allocation's root MAC of the signed
// bytes (allocation and grant), truncated.
func deriveMAC(rootMAC *[MACSize]byte, k *RemoteKey, out *[MACSize]byte) {
	h := hmac.New(sha256.New, rootMAC[:])
	h.Write([]byte("gxfer-grant"))
	var buf [keySigned]byte
	h.Write(k.appendSigned(buf[:0]))
	var sum [sha256.Size]byte
	copy(out[:], h.Sum(sum[:0]))
}

// Check reports whether a request of n bytes at off, relative to k's view,
// lies inside the view and the signed allocation, with overflow-safe
// arithmetic. Empty requests are refused. The owner calls it (after
// [Verify]) before touching memory for a peer.
func (k *RemoteKey) Check(off, n uint64) error {
	_, err := k.Span(off, n)
	return err
}

// Span is Check that also returns where the request starts in the
// allocation (k.Offset+off); the owner's address is Base plus that.
func (k *RemoteKey) Span(off, n uint64) (uint64, error) {
	if start, ok := k.InSpan(off, n); ok {
		return start, nil
	}
	rerr := func(why string) error {
		return &RangeError{Off: off, Len: n, ViewOff: k.Offset, ViewLen: k.Len, Length: k.Length, Reason: why}
	}
	switch {
	case n == 0:
		return 0, rerr("empty request")
	case k.Offset > k.Length || k.Len > k.Length-k.Offset:
		return 0, rerr("view outside the allocation")
	case k.Offset < k.GrantOffset || k.Offset-k.GrantOffset > k.GrantLen || k.Len > k.GrantLen-(k.Offset-k.GrantOffset):
		return 0, rerr("view outside the key's grant")
	case off > k.Len || n > k.Len-off:
		return 0, rerr("request outside the view")
	}
	return 0, rerr("out of range") // not reached: InSpan refuses only what a case above names
}

// InSpan is Span without the error: whether the request is inside the
// view (and the view inside the grant), and where it starts.
func (k *RemoteKey) InSpan(off, n uint64) (uint64, bool) {
	ok := n != 0 && k.Offset <= k.Length && k.Len <= k.Length-k.Offset &&
		k.Offset >= k.GrantOffset && k.Offset-k.GrantOffset <= k.GrantLen && k.Len <= k.GrantLen-(k.Offset-k.GrantOffset) &&
		off <= k.Len && n <= k.Len-off
	return k.Offset + off, ok
}

// Allows reports whether k grants every access in f.
func (k *RemoteKey) Allows(f KeyFlags) bool { return f != 0 && k.Flags&f == f }

// NewSecret returns a fresh random 32-byte secret for signing keys.
func NewSecret() ([]byte, error) {
	s := make([]byte, 32)
	if _, err := rand.Read(s); err != nil {
		return nil, fmt.Errorf("wire: secret: %w", err)
	}
	return s, nil
}

// macState is a keyed HMAC with scratch space, so that computing a MAC
// does not allocate when the state is reused.
type macState struct {
	h   hash.Hash
	buf [keySigned]byte
	sum [sha256.Size]byte
}

func newMACState(secret []byte) *macState { return &macState{h: hmac.New(sha256.New, secret)} }

// mac computes k's MAC: the root MAC of its allocation, or for a key
// granting less, the MAC derived from it.
func (s *macState) mac(k *RemoteKey, out *[MACSize]byte) {
	s.h.Reset()
	s.h.Write(k.appendSigned(s.buf[:0])[:keyAlloc])
	if k.root() {
		copy(out[:], s.h.Sum(s.sum[:0]))
		return
	}
	var rootMAC [MACSize]byte
	copy(rootMAC[:], s.h.Sum(s.sum[:0]))
	deriveMAC(&rootMAC, k, out)
}

// defaultGrant makes a key without a grant (GrantLen 0) grant its whole
// allocation.
func defaultGrant(k *RemoteKey) {
	if k.GrantLen == 0 && k.GrantOffset == 0 {
		k.GrantLen = k.Length
	}
}

// Sign validates the signed part of k and sets k.MAC (a key with GrantLen
// 0 is first made to grant its whole allocation) to the HMAC-SHA256 (truncated to MACSize
// bytes) of its signed part under secret. The owner signs every key it
// exports; secret is per engine and never leaves it.
func Sign(k *RemoteKey, secret []byte) error {
	if len(secret) < MinSecretLen {
		return invalid("secret of %d bytes (need %d)", len(secret), MinSecretLen)
	}
	defaultGrant(k)
	if err := k.validateSigned(); err != nil {
		return invalid("remote key: %v", err)
	}
	newMACState(secret).mac(k, &k.MAC)
	return nil
}

// Verify checks that the signed part of k is valid and that its MAC was
// made by [Sign] with secret (or derived from such a MAC by
// [RemoteKey.Slice]). A forged or edited key, a widened grant among them,
// fails with ErrBadSignature. The view is not signed (see [RemoteKey]):
// check requests against the view and the grant with [RemoteKey.Check].
// The comparison is constant-time.
func Verify(k *RemoteKey, secret []byte) error {
	if len(secret) < MinSecretLen {
		return invalid("secret of %d bytes (need %d)", len(secret), MinSecretLen)
	}
	return verifyWith(newMACState(secret), k)
}

func verifyWith(s *macState, k *RemoteKey) error {
	if err := k.validateSigned(); err != nil {
		return malformed("remote key: %v", err)
	}
	var want [MACSize]byte
	s.mac(k, &want)
	if !hmac.Equal(want[:], k.MAC[:]) {
		return fmt.Errorf("%w: alloc %d generation %d", ErrBadSignature, k.AllocID, k.Generation)
	}
	return nil
}

// Signer signs and verifies keys under one secret without allocating
// (when the key is valid): it keeps keyed HMAC states in a pool. It is safe for concurrent use; an
// owner verifying a key on every request should use one.
type Signer struct {
	pool sync.Pool
}

// NewSigner returns a Signer for secret (copied).
func NewSigner(secret []byte) (*Signer, error) {
	if len(secret) < MinSecretLen {
		return nil, invalid("secret of %d bytes (need %d)", len(secret), MinSecretLen)
	}
	s := append([]byte(nil), secret...)
	return &Signer{pool: sync.Pool{New: func() any { return newMACState(s) }}}, nil
}

// Sign is [Sign] with the Signer's secret.
func (s *Signer) Sign(k *RemoteKey) error {
	defaultGrant(k)
	if err := k.validateSigned(); err != nil {
		return invalid("remote key: %v", err)
	}
	st := s.pool.Get().(*macState)
	st.mac(k, &k.MAC)
	s.pool.Put(st)
	return nil
}

// Verify is [Verify] with the Signer's secret.
func (s *Signer) Verify(k *RemoteKey) error {
	st := s.pool.Get().(*macState)
	err := verifyWith(st, k)
	s.pool.Put(st)
	return err
}
