package copier

import (
	"sync/atomic"
	"unsafe"

	"github.com/gxfer/gxfer/dma"
)

// FreedBit marks a freed buffer in its reference count (Mem.Refs): the
// count of operations in flight is the rest.
const FreedBit = uint64(1) << 63

// Mem is a buffer as the copier sees it: what a copy reads of the
// engine's Buffer, which embeds it (no allocation, no indirect call per
// copy). Its fields are set when the buffer is made and never change.
type Mem struct {
	Gaudi  bool           // device memory (else host memory)
	Device *Device        // the device, for Gaudi memory
	DMem   *dma.DeviceMem // the device allocation, for Gaudi memory
	Addr   uint64         // host address, or device address of Gaudi memory
	Ptr    unsafe.Pointer // host memory's first byte
	Size   uint64
	ID     uint64   // the buffer's id, for messages
	RT     *Runtime // the runtime, for runtime memory (Addr: its address)
	// Refs is the buffer's reference count (FreedBit: freed); the
	// copier drops the references of the copies it finishes.
	Refs *atomic.Uint64
	// Owner is the engine's buffer (Config.Destroy gets it back).
	Owner any
}

// Slice is N bytes at Off in a buffer.
type Slice struct {
	M      *Mem
	Off, N uint64
}

// HostBytes is the slice's host memory.
func (s Slice) HostBytes() []byte {
	return unsafe.Slice((*byte)(unsafe.Add(s.M.Ptr, s.Off)), s.N)
}

// Overlaps reports whether a and b share bytes of one buffer.
func Overlaps(a, b Slice) bool {
	if a.M != b.M {
		return false
	}
	return a.Off < b.Off+b.N && b.Off < a.Off+a.N
}
