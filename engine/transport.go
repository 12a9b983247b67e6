package engine

import (
	"fmt"
)

// Transport kinds and the Dial option that forces one.

// TransportKind names how an endpoint reaches its peer.
type TransportKind uint8

// Transports.
const (
	// TransportAuto lets Dial choose: RDMA when both sides have a usable
	// device, else TCP.
	TransportAuto TransportKind = iota
	// TransportTCP moves data in Data frames over TCP.
	TransportTCP
	// TransportRDMA moves data with RDMA writes and reads.
	TransportRDMA
	// TransportIPC is a unix socket on one node: shared memory and fd
	// passing (Listen/Dial "unix").
	TransportIPC
	// transportPipe is the in-memory pair of the tests
	// (internal/datapath/pipe).
	transportPipe
)

// String names the transport: "auto", "tcp", "rdma" or "ipc".
func (k TransportKind) String() string {
	switch k {
	case TransportAuto:
		return "auto"
	case TransportTCP:
		return "tcp"
	case TransportRDMA:
		return "rdma"
	case TransportIPC:
		return "ipc"
	case transportPipe:
		return "pipe"
	}
	return fmt.Sprintf("TransportKind(%d)", uint8(k))
}

// DialOption configures Dial.
type DialOption func(*dialConfig)

type dialConfig struct{ transport TransportKind }

// WithTransport forces the transport of a "tcp" Dial (overrides
// Config.Transport).
func WithTransport(k TransportKind) DialOption {
	return func(c *dialConfig) { c.transport = k }
}

// chooseTransport resolves what a network Dial (or Listen) asks for:
// TransportTCP, TransportRDMA (forced: this engine has a usable device) or
// TransportAuto (RDMA if the peer offers it too, else TCP).
func (e *Engine) chooseTransport(opts []DialOption) (TransportKind, error) {
	dc := dialConfig{transport: e.cfg.Transport}
	for _, o := range opts {
		if o != nil { // a nil option is skipped, as a nil OpOption is
			o(&dc)
		}
	}
	switch dc.transport {
	case TransportTCP:
		return TransportTCP, nil
	case TransportAuto:
		if e.rdma == nil {
			return TransportTCP, nil
		}
		return TransportAuto, nil
	case TransportRDMA:
		if e.rdma == nil {
			return 0, newErr(ErrNotSupported, "transport rdma: "+e.rdmaWhy, nil)
		}
		return TransportRDMA, nil
	}
	return 0, newErr(ErrInvalid, "transport "+dc.transport.String()+" cannot be dialed over the network", nil)
}
