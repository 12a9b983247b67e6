package dma

import (
	"fmt"
	"os"
	"runtime"
	"sync/atomic"

	"github.com/gxfer/gxfer/internal/gaudi3"
	"github.com/gxfer/gxfer/internal/hlsys"
)

// CB is a command buffer: packets the device executes from one queue.
//
// Gaudi1 uses a kernel CB (CB CREATE, mmapped for filling); a chunk names
// it by handle. Gaudi2 uses a user CB: pages from AllocHostPages mapped
// into the device MMU with MapHost; a chunk names it by device VA with
// CSChunkFlagsUserAllocCB (every Gaudi2 queue is "user CB only"). A
// Gaudi3 CB is Go memory whose packets Submit copies into a PDMA
// channel's ring; Submit refuses a chunk of a closed one (ErrClosed).
//
// A CB is filled and submitted by one goroutine at a time, and must not be
// changed, Reset or closed while a CS that uses it is in flight.
// Device.Close waits for a change in progress (AddLinDMA, AddMemset,
// AddNOP, Reset); once the CB is released those fail with ErrClosed.
type CB struct {
	d     *Device
	id    uint64
	model Model
	buf   []byte // packet area, len == capacity; left alone at release (readers)
	cap   int    // capacity, fixed
	n     int    // bytes used (written by the owner only)

	// Gaudi1 kernel CB
	handle uint64
	mapped []byte // the whole mmap
	// destroyed: CB DESTROY of handle succeeded (handle stays, for
	// racing readers of a stale CB's Chunk).
	destroyed bool
	// Gaudi2 user CB (va set)
	pages []byte
	va    uint64
	incs  int // Gaudi3: packets that advance the completion counter
	// gen counts the Resets (Gaudi3): a chunk aliases the bytes and
	// carries incs as they were at Chunk, so Submit refuses a chunk
	// taken before the last Reset.
	gen atomic.Uint32

	done bool // guarded by d.mu
	// use counts the changes in progress (enter, leave); release sets
	// cbReleased in it and waits for them before it unmaps the buffer.
	use atomic.Int32
}

// NewCB creates a command buffer that holds capacity bytes of packets
// (at most MaxCBSize).
func (d *Device) NewCB(capacity int) (*CB, error) {
	op := fmt.Sprintf("create %d-byte command buffer on %s", capacity, d.Name())
	if capacity < NOPSize || capacity > hlsys.MaxCBSize {
		return nil, newErr(op, ErrInvalid, fmt.Sprintf("capacity must be in [%d, %d]", NOPSize, hlsys.MaxCBSize), nil)
	}
	if err := d.enter(op); err != nil {
		return nil, err
	}
	defer d.leave()
	cb, err := d.newCB(capacity)
	if err != nil {
		return nil, d.ioErr(op, "", err)
	}
	cb.id = d.track(cb)
	return cb, nil
}

func (d *Device) newCB(capacity int) (*CB, error) {
	cb := &CB{d: d, model: d.model, cap: capacity}
	if d.model.direct() {
		// The packets are copied into a channel's ring at Submit: memory
		// the device never reads, so Go memory, which a chunk keeps alive
		// (pages unmapped at Close would fault a Submit of a stale chunk).
		// The completion writes they carry need direct mode set up.
		if err := d.g3.ensure(); err != nil {
			return nil, err
		}
		cb.buf = make([]byte, capacity)
		return cb, nil
	}
	if !d.model.userCB() {
		h, err := hlsys.CBCreate(d.b, uint32(capacity), 0)
		if err != nil {
			return nil, err
		}
		pg := os.Getpagesize()
		length := (capacity + pg - 1) / pg * pg // the driver insists on exactly this length
		m, err := d.b.Mmap(int64(h), length)
		if err != nil {
			if derr := hlsys.CBDestroy(d.b, h); derr != nil {
				d.log.Warn().Err(derr).Msg("destroy CB after failed mmap")
			}
			return nil, fmt.Errorf("mmap CB: %w", err)
		}
		cb.handle, cb.mapped, cb.buf = h, m, m[:capacity:capacity]
		return cb, nil
	}
	pages, err := AllocHostPages(uint64(capacity))
	if err != nil {
		return nil, err
	}
	va, err := hlsys.MemMapHost(d.b, pointerOf(pages), uint64(capacity), 0, 0)
	if err != nil {
		_ = FreeHostPages(pages)
		return nil, err
	}
	cb.pages, cb.va, cb.buf = pages, va, pages[:capacity:capacity]
	return cb, nil
}

// Reset empties the buffer.
func (cb *CB) Reset() {
	if cb.enter("reset") != nil {
		return // released: Close emptied it
	}
	cb.reset()
	cb.leave()
}

// reset is Reset for a caller that marked the change (enter).
func (cb *CB) reset() {
	cb.n, cb.incs = 0, 0
	cb.gen.Add(1)
}

// Len is the number of bytes of packets in the buffer.
func (cb *CB) Len() int { return cb.n }

// Cap is the capacity in bytes.
func (cb *CB) Cap() int { return cb.cap }

// Remaining is Cap() - Len().
func (cb *CB) Remaining() int { return cb.cap - cb.n }

// Bytes returns the packets written so far (aliasing the buffer), nil
// once the buffer is released.
func (cb *CB) Bytes() []byte {
	if cb.released() {
		return nil
	}
	return cb.buf[:cb.n]
}

// linDMACount is the number of LIN_DMA packets needed for size bytes.
func linDMACount(size uint64) uint64 {
	n := size / hlsys.LinDMAMaxTSize // size+max-1 would wrap near 2^64
	if size%hlsys.LinDMAMaxTSize != 0 {
		n++
	}
	return n
}

// enter marks a change to the buffer in progress, so that its release
// (CB.Close, Device.Close: Gaudi1/2 unmap it) waits for the change; it
// fails with ErrClosed once the buffer is released. Call cb.leave after
// the change. The count is the CB's own: a change touches no cache line
// another core writes.
func (cb *CB) enter(op string) error {
	if cb.use.Add(1) >= cbReleased {
		cb.use.Add(-1)
		if cb.d != nil && cb.d.lost() {
			return cb.d.closedErr(op)
		}
		return newErr(op, ErrClosed, "command buffer closed", nil)
	}
	return nil
}

func (cb *CB) leave() { cb.use.Add(-1) }

// released reports whether the buffer was released (CB.Close or
// Device.Close).
func (cb *CB) released() bool { return cb.use.Load() >= cbReleased }

// cbReleased is the bit of CB.use that release sets.
const cbReleased = 1 << 30

// markReleased sets cbReleased (once) and waits for the changes begun
// before it: later ones see it and fail.
func (cb *CB) markReleased() {
	for {
		u := cb.use.Load()
		if u >= cbReleased || cb.use.CompareAndSwap(u, u+cbReleased) {
			break
		}
	}
	for cb.use.Load() != cbReleased {
		runtime.Gosched()
	}
}

func (cb *CB) checkRange(op string, dst, size uint64) error {
	if size == 0 {
		return newErr(op, ErrInvalid, "size 0", nil)
	}
	if dst+size < dst {
		return newErr(op, ErrInvalid, "destination range wraps", nil)
	}
	if cb.model == ModelGaudi1 && dst+size-1 > hlsys.Gaudi1DstAddrMask {
		return newErr(op, ErrInvalid, "Gaudi1 destination addresses have 56 bits", nil)
	}
	return nil
}

// AddLinDMA appends LIN_DMA packets copying size bytes from src to dst
// (device-side addresses: DeviceMem.Addr, HostMapping.DeviceAddr), split
// into as many packets as the 32-bit transfer size needs (each at most
// MaxLinDMASize bytes). Every packet has MB set. If the packets do
// not fit, nothing is appended and the error wraps ErrCBFull.
func (cb *CB) AddLinDMA(dst, src, size uint64) error {
	const op = "add LIN_DMA"
	if err := cb.enter(op); err != nil {
		return err
	}
	defer cb.leave()
	if err := cb.checkRange(op, dst, size); err != nil {
		return err
	}
	if src+size < src {
		return newErr(op, ErrInvalid, "source range wraps", nil)
	}
	if need := linDMACount(size) * uint64(cb.model.copyPacketSize()); need > uint64(cb.Remaining()) {
		return newErr(op, ErrCBFull, fmt.Sprintf("need %d bytes, %d left", need, cb.Remaining()), nil)
	}
	if cb.model.direct() {
		cb.addG3(dst, src, size, false)
		return nil
	}
	ctl := linDMACtl(cb.model, MB, false)
	for size > 0 {
		n := min(size, hlsys.LinDMAMaxTSize)
		cb.n += putLinDMA(cb.buf[cb.n:], cb.model, dst, src, uint32(n), ctl)
		dst, src, size = dst+n, src+n, size-n
	}
	return nil
}

// AddMemset appends LIN_DMA memset packets filling size bytes at dst with
// the 64-bit pattern value (see EncodeMemset), split like AddLinDMA.
func (cb *CB) AddMemset(dst, value, size uint64) error {
	const op = "add LIN_DMA memset"
	if err := cb.enter(op); err != nil {
		return err
	}
	defer cb.leave()
	if err := cb.checkRange(op, dst, size); err != nil {
		return err
	}
	if need := linDMACount(size) * uint64(cb.model.copyPacketSize()); need > uint64(cb.Remaining()) {
		return newErr(op, ErrCBFull, fmt.Sprintf("need %d bytes, %d left", need, cb.Remaining()), nil)
	}
	if cb.model.direct() {
		cb.addG3(dst, value, size, true)
		return nil
	}
	ctl := linDMACtl(cb.model, MB, true)
	for size > 0 {
		n := min(size, hlsys.LinDMAMaxTSize)
		cb.n += putLinDMA(cb.buf[cb.n:], cb.model, dst, value, uint32(n), ctl)
		dst, size = dst+n, size-n
	}
	return nil
}

// AddNOP appends a NOP. On Gaudi2 a trailing AddNOP(EB|MB) after the last
// LIN_DMA makes the completion wait for the DMA engine (gaudi-uapi §7.3).
func (cb *CB) AddNOP(flags PacketFlags) error {
	if err := cb.enter("add NOP"); err != nil {
		return err
	}
	defer cb.leave()
	if cb.Remaining() < NOPSize {
		return newErr("add NOP", ErrCBFull, "", nil)
	}
	if cb.model.direct() {
		cb.n += putG3NOP(cb.buf[cb.n:], flags)
		return nil
	}
	cb.n += EncodeNOP(cb.buf[cb.n:], flags)
	return nil
}

// addG3 appends Gaudi3 LIN_PDMA packets (room checked). The direction bit
// is device-to-host only when the destination is mapped host memory and
// the source is not (as synapse sets it).
func (cb *CB) addG3(dst, src, size uint64, memset bool) {
	dir := gaudi3.DirHostToDevice
	if cb.d.AddrKind(dst) == AddrHost && (memset || cb.d.AddrKind(src) != AddrHost) {
		dir = gaudi3.DirDeviceToHost
	}
	cb.n += cb.d.g3.packets(cb.buf[cb.n:], dst, src, size, memset, dir)
	cb.incs += int(linDMACount(size))
}

// Chunk returns the CS chunk that executes the buffer's packets (as they
// are now) on queue. On Gaudi3 Submit refuses it (ErrInvalid) once the
// buffer was Reset: its completion accounting is that of the packets it
// was taken with.
func (cb *CB) Chunk(queue uint32) Chunk {
	c := Chunk{Queue: queue, Size: uint32(cb.n)}
	if cb.model.direct() {
		c.direct, c.incs, c.cb, c.gen = true, cb.incs, cb, cb.gen.Load()
		c.pkts = cb.Bytes() // nil once released: Submit refuses the chunk
		return c
	}
	if cb.model.userCB() {
		c.Handle, c.UserCB = cb.va, true
	} else {
		c.Handle = cb.handle
	}
	return c
}

// Close releases the buffer (Gaudi1: munmap + CB DESTROY; Gaudi2: UNMAP
// + free the pages). When the driver refuses DESTROY or UNMAP (the
// device is not operational: EBUSY) the buffer is closed for use but its
// resources stay, and Close may be called again. A second Close after
// one that succeeded (or Close after Device.Close) returns nil.
func (cb *CB) Close() error {
	if cb == nil || cb.d == nil {
		return nil
	}
	d := cb.d
	d.gate.RLock()
	defer d.gate.RUnlock()
	if d.closed {
		return nil
	}
	return cb.release()
}

func (cb *CB) release() error {
	d := cb.d
	d.mu.Lock()
	if cb.done {
		d.mu.Unlock()
		return nil
	}
	cb.done = true
	delete(d.live, cb.id)
	for i, p := range d.cbPool {
		if p == cb {
			d.cbPool = append(d.cbPool[:i], d.cbPool[i+1:]...)
			break
		}
	}
	d.mu.Unlock()
	err := cb.destroy()
	if err != nil && cb.kept() && !d.closed {
		// The driver refused DESTROY or UNMAP (hl_cb_ioctl, hl_mem_ioctl:
		// EBUSY while the device is not operational) and still holds
		// the buffer: it stays live (released: no more changes) for a
		// later Close to retry; Device.Close leaves it to the context's
		// teardown.
		d.mu.Lock()
		cb.done = false
		d.live[cb.id] = cb
		d.mu.Unlock()
	}
	return err
}

// kept reports whether destroy left driver resources behind (a refused
// CB DESTROY or UNMAP), for a retry.
func (cb *CB) kept() bool { return (cb.handle != 0 && !cb.destroyed) || cb.pages != nil }

// destroy frees the buffer's device and host resources (no tracking).
func (cb *CB) destroy() error {
	d := cb.d
	op := "destroy command buffer on " + d.Name()
	cb.markReleased() // from here no change and no Bytes: buf is left as it is for racing readers of the owner
	if cb.model.direct() {
		return nil
	}
	if !cb.model.userCB() {
		if d.gone {
			// The backend's Close unmapped it; the context's teardown
			// destroyed it.
			cb.mapped = nil
			return nil
		}
		var errs []error
		if cb.mapped != nil {
			if err := d.b.Munmap(cb.mapped); err != nil {
				errs = append(errs, err)
			}
			cb.mapped = nil
		}
		if err := hlsys.CBDestroy(d.b, cb.handle); err != nil {
			errs = append(errs, err) // handle kept: a later destroy retries
		} else {
			cb.destroyed = true
		}
		return joinWrap(op, errs)
	}
	if d.gone {
		// The context's teardown unmapped the pages and dropped its pin.
		err := FreeHostPages(cb.pages)
		cb.pages = nil
		return err
	}
	if err := hlsys.MemUnmap(d.b, cb.va); err != nil {
		// The pages stay pinned by the device; do not return them to the
		// system. A later destroy retries; the context teardown
		// releases the pin.
		return d.ioErr(op, "", err)
	}
	err := FreeHostPages(cb.pages)
	cb.pages = nil
	return err
}

func joinWrap(op string, errs []error) error {
	switch len(errs) {
	case 0:
		return nil
	case 1:
		return wrapErr(op, errs[0])
	}
	return newErr(op, errnoKind(errs[0]), "", fmt.Errorf("%w; %w", errs[0], errs[1]))
}
