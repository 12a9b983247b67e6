package handshake

import (
	"context"
	"crypto/rand"
	"errors"

	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// Authentication of TCP peers: engines configured with the same
// Config.ClusterSecret prove it to each other with an HMAC
// challenge-response between Hello and HelloAck (wire.Auth documents the
// exchange). A listener with a secret refuses peers without it (before
// they count as peers or hold anything but a handshake slot for at most
// the handshake deadline); a dialer with a secret refuses a listener that
// cannot prove it holds the same one. Unix sockets are not concerned:
// their peers are checked by the kernel (same uid, SO_PEERCRED).

// recvAuth receives the peer's next Auth (its Error, if it sent one).
func recvAuth(ctx context.Context, wc *wire.Conn) (wire.Auth, error) {
	var a wire.Auth
	f, err := wc.Recv(ctx)
	if err != nil {
		return a, err
	}
	return a, f.DecodeOrError(&a)
}

// authDialer is the dialer's side of the exchange, after its Hello.
func authDialer(ctx context.Context, wc *wire.Conn, secret []byte, local wire.Hello) error {
	chal, err := recvAuth(ctx, wc)
	if err != nil {
		return authErr(err)
	}
	var mine wire.Auth
	if _, err := rand.Read(mine.Nonce[:]); err != nil {
		return err
	}
	mine.MAC = wire.AuthMAC(secret, "dialer", chal.Nonce, mine.Nonce, local.EngineID)
	if err := wc.Send(&mine); err != nil {
		return err
	}
	proof, err := recvAuth(ctx, wc)
	if err != nil {
		return authErr(err)
	}
	if !wire.AuthEqual(proof.MAC, wire.AuthMAC(secret, "listener", chal.Nonce, mine.Nonce, local.EngineID)) {
		return gxerr.New(gxerr.Unauthenticated, "the listener does not hold our cluster secret", nil)
	}
	return nil
}

// authListener is the listener's side, after the dialer's Hello; it
// answers a refusal itself.
func authListener(ctx context.Context, wc *wire.Conn, secret []byte, hello wire.Hello) error {
	refuse := func(why string) error {
		_ = wc.Send(wire.NewError(0, wire.StatusRefused, why))
		return gxerr.New(gxerr.Unauthenticated, why, nil)
	}
	switch {
	case len(secret) == 0 && hello.Caps&wire.CapAuth == 0:
		return nil
	case len(secret) == 0:
		return refuse("authentication asked for, but this listener has no cluster secret")
	case hello.Caps&wire.CapAuth == 0:
		return refuse("this listener authenticates its peers (Config.ClusterSecret)")
	}
	var chal wire.Auth
	if _, err := rand.Read(chal.Nonce[:]); err != nil {
		return err
	}
	if err := wc.Send(&chal); err != nil {
		return err
	}
	resp, err := recvAuth(ctx, wc)
	if err != nil {
		return err
	}
	if !wire.AuthEqual(resp.MAC, wire.AuthMAC(secret, "dialer", chal.Nonce, resp.Nonce, hello.EngineID)) {
		return refuse("authentication failed")
	}
	proof := wire.Auth{MAC: wire.AuthMAC(secret, "listener", chal.Nonce, resp.Nonce, hello.EngineID)}
	return wc.Send(&proof)
}

// authErr maps the listener's refusal during authentication.
func authErr(err error) error {
	var we *wire.Error
	if errors.As(err, &we) && we.Code == wire.StatusRefused {
		return gxerr.New(gxerr.Unauthenticated, "refused by the listener", we)
	}
	return err
}
