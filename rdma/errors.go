package rdma

import (
	"errors"
	"fmt"

	"github.com/gxfer/gxfer/internal/verbs"
)

var (
	// ErrUnavailable wraps every "RDMA cannot be used here" error; the
	// wrapping error says why.
	ErrUnavailable = verbs.ErrUnavailable
	// ErrNoDevice (which wraps ErrUnavailable): libibverbs loaded, no device.
	ErrNoDevice = verbs.ErrNoDevice
	// ErrNotSupported: the device, kernel or library lacks a feature, e.g.
	// DMA-BUF memory regions on Soft-RoCE (EOPNOTSUPP). Fall back to staging.
	ErrNotSupported = verbs.ErrNotSupported
	// ErrClosed: the object (or its device) was closed.
	ErrClosed = errors.New("rdma: closed")
	// ErrInvalid: a bad argument; nothing was posted.
	ErrInvalid = errors.New("rdma: invalid argument")
	// ErrQueueFull: the QP's queue or the CQ's slot table is full; nothing
	// was posted.
	ErrQueueFull = errors.New("rdma: queue full")
	// ErrBusy: Close of a PD with open MRs or QPs, or of a CQ with QPs.
	ErrBusy = errors.New("rdma: in use")
	// ErrCompletion is wrapped by every failed completion's error.
	ErrCompletion = errors.New("rdma: work request failed")
	// ErrFlushed: the work request was flushed because its QP entered the
	// error state (also wraps ErrCompletion).
	ErrFlushed = errors.New("rdma: work request flushed")
	// ErrRemoteAccess: the peer refused the access (bad rkey, range or
	// permission; also wraps ErrCompletion).
	ErrRemoteAccess = errors.New("rdma: remote access error")
)

// CompletionError is a failed completion.
type CompletionError struct {
	Op        OpKind
	Status    Status
	VendorErr uint32
	QPN       uint32
}

func (e *CompletionError) Error() string {
	return fmt.Sprintf("rdma: %v on QP %d: %v (status %d, vendor error %#x)", e.Op, e.QPN, e.Status, uint32(e.Status), e.VendorErr)
}

// Is matches ErrCompletion, and ErrFlushed or ErrRemoteAccess by status.
func (e *CompletionError) Is(target error) bool {
	switch target {
	case ErrCompletion:
		return true
	case ErrFlushed:
		return e.Status == verbs.WCWRFlushErr
	case ErrRemoteAccess:
		return e.Status == verbs.WCRemAccessErr
	}
	return false
}
