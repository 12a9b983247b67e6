package wire

import (
	"crypto/hmac"
	"crypto/sha256"
)

// AuthSize is the size of an Auth nonce and of its MAC.
const AuthSize = 32

// CapAuth (in a dialer's Hello) says the dialer holds a cluster secret and
// authenticates the connection with Auth messages before the listener's
// HelloAck.
const CapAuth Caps = 1 << 7

// Auth carries one step of the mutual challenge-response that
// authenticates a connection between two engines holding the same cluster
// secret, between Hello and HelloAck (TCP only; off unless both sides are
// configured with a secret):
//
//	dialer   -> Hello (CapAuth)
//	listener -> Auth{Nonce: nL}                           challenge
//	dialer   -> Auth{Nonce: nD, MAC: AuthMAC(dialer)}     the dialer's proof
//	listener -> Auth{MAC: AuthMAC(listener)}, HelloAck    the listener's proof
//
// Each MAC is HMAC-SHA256 under the secret of a role label, both nonces
// and the dialer's engine id ([AuthMAC]), so a proof cannot be replayed on
// another connection or reflected to the other role. A side that does not
// hold the secret, or holds another, is refused (Error StatusRefused). The
// exchange authenticates the peers; it does not encrypt or protect the
// frames that follow (use a private network or a tunnel for that).
type Auth struct {
	Nonce [AuthSize]byte
	MAC   [AuthSize]byte
}

// Type returns TypeAuth.
func (m *Auth) Type() Type        { return TypeAuth }
func (m *Auth) requestID() uint64 { return 0 }

// AppendPayload appends the Auth payload: the nonce, then the MAC.
func (m *Auth) AppendPayload(b []byte) ([]byte, error) {
	b = append(b, m.Nonce[:]...)
	return append(b, m.MAC[:]...), nil
}

// DecodePayload decodes an Auth.
func (m *Auth) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeAuth, p); err != nil {
		return err
	}
	if len(p) != 2*AuthSize {
		return malformed("Auth: %d bytes, want %d", len(p), 2*AuthSize)
	}
	copy(m.Nonce[:], p)
	copy(m.MAC[:], p[AuthSize:])
	return nil
}

// AuthMAC is the proof of role ("dialer" or "listener") over the two
// nonces and the dialer's engine id, under secret.
func AuthMAC(secret []byte, role string, listenerNonce, dialerNonce [AuthSize]byte, dialer EngineID) [AuthSize]byte {
	h := hmac.New(sha256.New, secret)
	h.Write([]byte("gxfer-auth-" + role))
	h.Write([]byte{0})
	h.Write(listenerNonce[:])
	h.Write(dialerNonce[:])
	h.Write(dialer[:])
	var out [AuthSize]byte
	copy(out[:], h.Sum(nil))
	return out
}

// AuthEqual compares two MACs in constant time.
func AuthEqual(a, b [AuthSize]byte) bool { return hmac.Equal(a[:], b[:]) }
