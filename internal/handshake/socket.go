package handshake

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/tcp"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// Network is the kind of connection a network makes: KindIPC for "unix"
// (a SOCK_SEQPACKET socket on this node), KindTCP for "tcp", "tcp4" and
// "tcp6".
func Network(network string) (datapath.Kind, error) {
	switch network {
	case "unix":
		return datapath.KindIPC, nil
	case "tcp", "tcp4", "tcp6":
		return datapath.KindTCP, nil
	}
	return 0, gxerr.New(gxerr.NotSupported, "network "+network+" (\"unix\" or \"tcp\")", nil)
}

// socket is a listening socket.
type socket struct {
	addr   string // the path, or the host:port bound
	accept func() (wire.Transport, *ipc.Cred, string, error)
	close  func() error
}

// badAddr reports whether err says the address names no socket (an
// empty, abstract or over-long unix path, a TCP address without a valid
// port): the caller's mistake, gxerr.Invalid.
func badAddr(err error) bool {
	var ae *net.AddrError
	return errors.Is(err, ipc.ErrInvalid) || errors.As(err, &ae)
}

// listenErr is the error of a listen at addr that failed with err.
func listenErr(addr string, err error) error {
	if badAddr(err) {
		return gxerr.New(gxerr.Invalid, "listen "+addr, err)
	}
	return fmt.Errorf("gxfer: listen %s: %w", addr, err)
}

// dialErr is the error of a dial to addr that failed with err.
func dialErr(addr string, err error) error {
	if badAddr(err) {
		return gxerr.New(gxerr.Invalid, "dial "+addr, err)
	}
	return gxerr.New(gxerr.Peer, "dial "+addr, err)
}

// connectErr is the error of a Dial's connect to addr that failed with
// err (dialErr's) under hctx, the Dial's bound: a connect that timed out
// at hctx's deadline is a gxerr.Timeout too.
func connectErr(hctx context.Context, addr string, timeout time.Duration, err error) error {
	return boundErr(hctx, fmt.Sprintf("connect to %s: no answer by the dial's deadline (at most %v)", addr, timeout), err)
}

// boundErr is err, the failure of one of a Dial's waits under hctx (its
// bound: DialConfig.Timeout or ctx's earlier deadline), wrapped in
// gxerr.Timeout with msg when the wait ended at hctx's deadline; any
// other err is returned as is.
func boundErr(hctx context.Context, msg string, err error) error {
	d, ok := hctx.Deadline()
	expired := ok && !time.Now().Before(d)
	if !expired || !(errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded)) {
		return err
	}
	return gxerr.New(gxerr.Timeout, msg, err)
}

// listenSocket opens the socket of a listener: a unix socket created
// 0600 whose peers of another uid are refused, or a TCP port.
func (l *Local) listenSocket(network, addr string) (socket, error) {
	if network == "unix" {
		il, err := ipc.Listen(addr, ipc.Config{Logger: l.Logger})
		if err != nil {
			return socket{}, listenErr(addr, err)
		}
		return socket{addr: il.Path(), close: il.Close, accept: func() (wire.Transport, *ipc.Cred, string, error) {
			c, err := il.Accept(context.Background())
			if err != nil {
				return nil, nil, "", err
			}
			cred := c.Peer()
			return c, &cred, "", nil
		}}, nil
	}
	nl, err := net.Listen(network, addr)
	if err != nil {
		return socket{}, listenErr(addr, err)
	}
	return socket{addr: nl.Addr().String(), close: nl.Close, accept: func() (wire.Transport, *ipc.Cred, string, error) {
		c, err := nl.Accept()
		if err != nil {
			return nil, nil, "", err
		}
		return tcp.Frame(c, l.TCPReadSpin), nil, c.RemoteAddr().String(), nil
	}}, nil
}

// dialSocket connects to a listener; on a unix socket it returns the
// kernel's credentials of the listening process too.
func (l *Local) dialSocket(ctx context.Context, network, addr string) (wire.Transport, *ipc.Cred, error) {
	if network == "unix" {
		c, err := ipc.Dial(ctx, addr, ipc.Config{Logger: l.Logger})
		if err != nil {
			return nil, nil, dialErr(addr, err)
		}
		cred := c.Peer()
		return c, &cred, nil
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, nil, dialErr(addr, err)
	}
	return tcp.Frame(c, l.TCPReadSpin), nil, nil
}
