package wire_test

import (
	"errors"
	"fmt"

	"github.com/gxfer/gxfer/wire"
)

// The owner signs a key for one of its allocations and hands its bytes to
// a peer; the peer decodes and slices it; the owner verifies what comes
// back and checks the requested range.
func ExampleRemoteKey() {
	secret := []byte("per-engine secret, never sent!!!") // wire.NewSecret() in real use

	// Owner: export.
	k := wire.RemoteKey{
		Owner: wire.EngineID{0x42}, OwnerPID: 1234, AllocID: 7, Generation: 1,
		MemType: wire.MemGaudi, Device: 0, Flags: wire.KeyRead | wire.KeyWrite,
		Base: 0x1001_0000_0000, Length: 1 << 20, Len: 1 << 20,
	}
	if err := wire.Sign(&k, secret); err != nil {
		panic(err)
	}
	exported, _ := k.MarshalBinary()
	fmt.Println("exported", len(exported), "bytes")

	// Peer: decode and narrow to the second 4 KiB page.
	var pk wire.RemoteKey
	if err := pk.UnmarshalBinary(exported); err != nil {
		panic(err)
	}
	page, _ := pk.Slice(4096, 4096)

	// Owner: a request arrives with the key.
	fmt.Println("verify:", wire.Verify(&page, secret))
	start, err := page.Span(0, 4096)
	fmt.Printf("address %#x, err %v\n", page.Base+start, err)
	fmt.Println("beyond the view:", errors.Is(page.Check(4000, 200), wire.ErrOutOfRange))

	forged := page
	forged.Length = 1 << 30 // try to reach more memory
	fmt.Println("forged:", errors.Is(wire.Verify(&forged, secret), wire.ErrBadSignature))
	// Output:
	// exported 128 bytes
	// verify: <nil>
	// address 0x100100001000, err <nil>
	// beyond the view: true
	// forged: true
}
