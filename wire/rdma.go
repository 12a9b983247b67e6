package wire

import "fmt"

// ---------------------------------------------------------------- RDMAConnect

// RDMAConnect carries one side's RDMA queue-pair endpoint, exchanged on
// the control connection right after the Hello when both sides accepted
// CapRDMA: the dialer sends its own, the acceptor connects its queue pair
// to it and answers with its own. The fields are those of an RC
// connection (rdma.Endpoint): QP number and initial packet sequence number
// (24 bits each), port LID, path MTU (the verbs enum, 1..5 for 256..4096
// bytes) and port GID (required on RoCE; may be zero on InfiniBand when
// the LID routes).
//
// A side with several NICs sends one RDMAConnect per NIC, in order, each
// naming its index (NIC) and how many it sends (NICs, 1 to MaxNICs): the
// dialer sends one for each of its NICs, the acceptor answers with as
// many as both sides have, and queue pair i connects the two sides' NIC i.
type RDMAConnect struct {
	QPN  uint32
	PSN  uint32
	LID  uint16
	MTU  uint8
	NIC  uint8
	NICs uint8
	GID  [16]byte
}

// RDMAConnectSize is the payload size of an RDMAConnect.
const RDMAConnectSize = 4 + 4 + 2 + 1 + 1 + 1 + 1 + 16

const rdma24 = 1<<24 - 1

// Type returns TypeRDMAConnect.
func (m *RDMAConnect) Type() Type        { return TypeRDMAConnect }
func (m *RDMAConnect) requestID() uint64 { return 0 }

func (m *RDMAConnect) check() error {
	switch {
	case m.QPN == 0 || m.QPN > rdma24:
		return fmt.Errorf("QPN %#x", m.QPN)
	case m.PSN > rdma24:
		return fmt.Errorf("PSN %#x", m.PSN)
	case m.MTU < 1 || m.MTU > 5:
		return fmt.Errorf("MTU %d", m.MTU)
	case m.GID == [16]byte{} && m.LID == 0:
		return fmt.Errorf("neither GID nor LID")
	case m.NICs < 1 || m.NICs > MaxNICs || m.NIC >= m.NICs:
		return fmt.Errorf("NIC %d of %d", m.NIC, m.NICs)
	}
	return nil
}

// AppendPayload appends the RDMAConnect payload: QPN u32, PSN u32, LID
// u16, MTU u8, 1 reserved byte, NIC u8, NICs u8, GID (16 bytes).
func (m *RDMAConnect) AppendPayload(b []byte) ([]byte, error) {
	if err := m.check(); err != nil {
		return b, invalid("RDMAConnect: %v", err)
	}
	b = appendU32(b, m.QPN)
	b = appendU32(b, m.PSN)
	b = appendU16(b, m.LID)
	b = append(b, m.MTU, 0, m.NIC, m.NICs)
	return append(b, m.GID[:]...), nil
}

// DecodePayload decodes and validates an RDMAConnect.
func (m *RDMAConnect) DecodePayload(h Header, p []byte) error {
	if err := checkHeader(h, TypeRDMAConnect, p); err != nil {
		return err
	}
	d := dec{b: p}
	n := RDMAConnect{QPN: d.u32(), PSN: d.u32(), LID: d.u16(), MTU: d.u8()}
	if !d.zeros(1) {
		return malformed("RDMAConnect: reserved field set")
	}
	n.NIC, n.NICs = d.u8(), d.u8()
	copy(n.GID[:], d.take(16))
	if err := d.done(TypeRDMAConnect); err != nil {
		return err
	}
	if err := n.check(); err != nil {
		return malformed("RDMAConnect: %v", err)
	}
	*m = n
	return nil
}
