package rdma

import (
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
