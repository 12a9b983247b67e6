package engine

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath/tcp"
	"github.com/gxfer/gxfer/wire"
)

// Issue 16 item 3: TCP peers authenticate each other with
// Config.ClusterSecret; a side without it, or with another, is refused
// with ErrUnauthenticated, on both sides of the handshake.
func TestClusterSecretAuthentication(t *testing.T) {
	secret := []byte("the cluster's shared secret, 32B")
	other := []byte("another cluster's secret, 32 byt")
	for _, tc := range []struct {
		name             string
		listener, dialer []byte
		ok               bool
	}{
		{"both off", nil, nil, true},
		{"same secret", secret, secret, true},
		{"dialer without", secret, nil, false},
		{"listener without", nil, secret, false},
		{"different secrets", secret, other, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			base := Config{Devices: DevicesNone, Transport: TransportTCP}
			lc, dc := base, base
			lc.ClusterSecret, dc.ClusterSecret = tc.listener, tc.dialer
			owner, peer := newEngine(t, lc), newEngine(t, dc)
			l, err := owner.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer l.Close()
			ep, err := peer.Dial(ctx, "tcp", l.Addr())
			if !tc.ok {
				require.ErrorIs(t, err, ErrUnauthenticated)
				owner.epMu.Lock()
				n := len(owner.endpoints)
				owner.epMu.Unlock()
				require.Zero(t, n, "the listener kept an endpoint")
				return
			}
			require.NoError(t, err)
			defer ep.Close()
			require.Equal(t, 2, ep.Stats().Lanes, "the lane authenticated too")
			b, err := owner.Alloc(4096, Host)
			require.NoError(t, err)
			k, err := b.Export()
			require.NoError(t, err)
			src, err := peer.Alloc(4096, Host)
			require.NoError(t, err)
			require.NoError(t, ep.PutSync(ctx, src.All(), k))
		})
	}
}

// A raw client that claims CapAuth and answers the challenge with a wrong
// MAC is refused and never becomes a peer.
func TestClusterSecretRefusesForgedProof(t *testing.T) {
	owner := newEngine(t, Config{Devices: DevicesNone, ClusterSecret: []byte("the cluster's shared secret, 32B")})
	l, err := owner.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	nc, err := net.Dial("tcp", l.Addr())
	require.NoError(t, err)
	c := wire.NewConn(wire.NewStreamTransport(nc), wire.ConnConfig{MaxFrame: tcp.MaxFrame})
	defer c.Close()
	h := fakeHello()
	h.Caps |= wire.CapAuth
	require.NoError(t, c.Send(&h))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, err := c.Recv(ctx)
	require.NoError(t, err)
	require.Equal(t, wire.TypeAuth, f.Header.Type)
	require.NoError(t, c.Send(&wire.Auth{Nonce: [wire.AuthSize]byte{1}, MAC: [wire.AuthSize]byte{2}}))
	f, err = c.Recv(ctx)
	require.NoError(t, err)
	var we wire.Error
	require.NoError(t, f.Decode(&we))
	require.Equal(t, wire.StatusRefused, we.Code)
	_, err = c.Recv(ctx)
	require.Error(t, err) // closed
	owner.epMu.Lock()
	defer owner.epMu.Unlock()
	require.Empty(t, owner.endpoints)
}

func TestClusterSecretTooShort(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone, ClusterSecret: []byte("short")})
	_, err := e.Listen("tcp", "127.0.0.1:0")
	require.ErrorIs(t, err, ErrInvalid)
	_, err = e.Dial(context.Background(), "tcp", "127.0.0.1:1")
	require.ErrorIs(t, err, ErrInvalid)
}

// Issue 16 item 7: lookupKey, the owner's one check of a presented key
// (unix requests, TCP Puts and Gets, delegated RDMA requests in
// serveRDMA), enforces the signed grant.
func TestLookupKeyEnforcesGrant(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	b, err := e.Alloc(1<<20, Host)
	require.NoError(t, err)
	root, err := b.Export()
	require.NoError(t, err)
	narrow := root.Slice(8192, 4096).k
	widened := narrow
	widened.GrantOffset, widened.GrantLen, widened.Offset, widened.Len = 0, 1<<20, 0, 1<<20
	shifted := narrow
	shifted.GrantOffset, shifted.Offset = 0, 0 // same length, another place
	for _, tc := range []struct {
		name   string
		k      wire.RemoteKey
		off, n uint64
		want   wire.Status
	}{
		{"root, whole", root.k, 0, 1 << 20, wire.StatusOK},
		{"narrow, its range", narrow, 0, 4096, wire.StatusOK},
		{"narrow, past its view", narrow, 4096, 1, wire.StatusOutOfRange},
		{"narrow, request too long", narrow, 0, 4097, wire.StatusOutOfRange},
		{"widened grant", widened, 0, 1 << 20, wire.StatusBadKey},
		{"shifted grant", shifted, 0, 4096, wire.StatusBadKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := tc.k
			_, st, msg := e.lookupKey(&k, tc.off, tc.n, wire.KeyWrite)
			require.Equal(t, tc.want, st, msg)
		})
	}
}
