package rdma

import (
	"encoding/binary"
	"fmt"
)

const psnMask = 1<<24 - 1

// Endpoint is what one side of an RC connection tells the other: its QP
// number, initial packet sequence number, port GID and LID, and MTU.
type Endpoint struct {
	QPN uint32 // 24 bits
	PSN uint32 // 24 bits
	GID GID    // RoCE: required; InfiniBand: may be zero (LID routing)
	LID uint16
	MTU MTU
}

// EndpointSize is the length of Endpoint's binary form.
const EndpointSize = 28

const endpointVersion = 1

// Validate checks a peer's endpoint.
func (e Endpoint) Validate() error {
	switch {
	case e.QPN == 0 || e.QPN > psnMask:
		return fmt.Errorf("%w: endpoint QPN %#x", ErrInvalid, e.QPN)
	case e.PSN > psnMask:
		return fmt.Errorf("%w: endpoint PSN %#x", ErrInvalid, e.PSN)
	case e.MTU.Bytes() == 0:
		return fmt.Errorf("%w: endpoint MTU %d", ErrInvalid, uint32(e.MTU))
	case e.GID.IsZero() && e.LID == 0:
		return fmt.Errorf("%w: endpoint has neither GID nor LID", ErrInvalid)
	}
	return nil
}

// MarshalBinary encodes e as 28 bytes: version 1, MTU, LID, QPN, PSN (all
// big-endian), GID.
func (e Endpoint) MarshalBinary() ([]byte, error) { return e.AppendBinary(nil) }

// AppendBinary appends the binary form to b.
func (e Endpoint) AppendBinary(b []byte) ([]byte, error) {
	b = append(b, endpointVersion, byte(e.MTU))
	b = binary.BigEndian.AppendUint16(b, e.LID)
	b = binary.BigEndian.AppendUint32(b, e.QPN)
	b = binary.BigEndian.AppendUint32(b, e.PSN)
	return append(b, e.GID[:]...), nil
}

// UnmarshalBinary decodes and validates a peer's endpoint.
func (e *Endpoint) UnmarshalBinary(b []byte) error {
	if len(b) != EndpointSize {
		return fmt.Errorf("%w: endpoint is %d bytes, want %d", ErrInvalid, len(b), EndpointSize)
	}
	if b[0] != endpointVersion {
		return fmt.Errorf("%w: endpoint version %d", ErrInvalid, b[0])
	}
	v := Endpoint{
		MTU: MTU(b[1]),
		LID: binary.BigEndian.Uint16(b[2:]),
		QPN: binary.BigEndian.Uint32(b[4:]),
		PSN: binary.BigEndian.Uint32(b[8:]),
	}
	copy(v.GID[:], b[12:])
	if err := v.Validate(); err != nil {
		return err
	}
	*e = v
	return nil
}
