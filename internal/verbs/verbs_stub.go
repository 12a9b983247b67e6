//go:build !linux || !cgo

package verbs

import "fmt"

// Built reports whether this build has the cgo binding (false: the stub).
const Built = false

var errStub = fmt.Errorf("%w: gxfer built without cgo (or not on linux)", ErrUnavailable)

// Load always fails in this build.
func Load() error { return errStub }

// HaveDmabufMR is false in this build.
func HaveDmabufMR() bool { return false }

// DeviceNames always fails in this build.
func DeviceNames() ([]string, error) { return nil, errStub }

// Context is an open device (never, in this build).
type Context struct{}

// Open always fails in this build.
func Open(string) (*Context, error) { return nil, errStub }

func (c *Context) Name() string                             { return "" }
func (c *Context) NumCompVectors() int                      { return 0 }
func (c *Context) Close() error                             { return nil }
func (c *Context) QueryDevice() (DeviceAttr, error)         { return DeviceAttr{}, errStub }
func (c *Context) QueryPort(uint8) (PortAttr, error)        { return PortAttr{}, errStub }
func (c *Context) QueryGID(uint8, int) (GID, error)         { return GID{}, errStub }
func (c *Context) AllocPD() (*PD, error)                    { return nil, errStub }
func (c *Context) CreateCompChannel() (*CompChannel, error) { return nil, errStub }
func (c *Context) CreateCQ(int, *CompChannel, int, int) (*CQ, error) {
	return nil, errStub
}

// PD is a protection domain.
type PD struct{}

func (pd *PD) Close() error { return nil }
func (pd *PD) RegMR(uintptr, uint64, uint64, Access) (*MR, error) {
	return nil, errStub
}
func (pd *PD) RegDmabufMR(uint64, uint64, uint64, int, Access) (*MR, error) {
	return nil, errStub
}
func (pd *PD) ProbeDmabufMR() error             { return errStub }
func (pd *PD) CreateQP(QPInitAttr) (*QP, error) { return nil, errStub }

// MR is a registered memory region.
type MR struct{}

func (mr *MR) LKey() uint32 { return 0 }
func (mr *MR) RKey() uint32 { return 0 }
func (mr *MR) Addr() uint64 { return 0 }
func (mr *MR) Len() uint64  { return 0 }
func (mr *MR) Close() error { return nil }

// CompChannel is a completion event channel.
type CompChannel struct{}

func (ch *CompChannel) FD() int                  { return -1 }
func (ch *CompChannel) GetCQEvent() (*CQ, error) { return nil, errStub }
func (ch *CompChannel) Close() error             { return nil }

// CQ is a completion queue.
type CQ struct{}

func (cq *CQ) CQE() int               { return 0 }
func (cq *CQ) Batch() int             { return 0 }
func (cq *CQ) ReqNotify(bool) error   { return errStub }
func (cq *CQ) Ack(int)                {}
func (cq *CQ) Poll([]WC) (int, error) { return 0, errStub }
func (cq *CQ) Close() error           { return nil }

// QP is a queue pair.
type QP struct{}

func (qp *QP) QPN() uint32                      { return 0 }
func (qp *QP) Cap() QPCap                       { return QPCap{} }
func (qp *QP) Modify(*QPAttr, QPAttrMask) error { return errStub }
func (qp *QP) Query(QPAttrMask) (QPAttr, error) { return QPAttr{}, errStub }
func (qp *QP) PostSend([]SendWR) (int, error)   { return 0, errStub }
func (qp *QP) PostRecv([]RecvWR) (int, error)   { return 0, errStub }
func (qp *QP) Close() error                     { return nil }

// PreparedSend is a send work request built once (never, in this build).
type PreparedSend struct{}

func (qp *QP) PrepareSend(SendWR) (*PreparedSend, error) { return nil, errStub }
func (qp *QP) PostPrepared(*PreparedSend, uint64) error  { return errStub }
func (p *PreparedSend) Free()                            {}
