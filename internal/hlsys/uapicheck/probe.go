package uapicheck

import (
	"encoding/binary"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gxfer/gxfer/internal/hlsys"
)

// A Probe calls one typed hlsys function on a recording backend and checks,
// against the header, which request it issued, which union member (which
// U[i] slot) each argument landed in, the op and flag numbers it wrote, and
// which member each output was read from: the recorder plants a distinct
// value at the header's offset of every output member and the probe checks
// that the function returns exactly those values.
type Probe struct {
	Name  string
	Gens  Gens
	Ioctl string // INFO, CB, CS, WAIT_CS or MEMORY
	// Call runs the function on b. It returns its outputs, and any input
	// known only at call time (a pointer), by name.
	Call func(b hlsys.Backend) (map[string]uint64, error)
	In   []In
	Out  []Out
}

// In is one argument member the function must fill.
type In struct {
	Type, Member string
	Want         uint64 // the value the probe passed
	WantC        string // or: a header expression (an op or flag number)
	WantResult   string // or: a value Call returned (a pointer)
	MaskC        string // compare only these bits (a header flag)
	AtLeast      bool   // the member may exceed the wanted value
}

// Out is one output member the function must read.
type Out struct {
	Type, Member string // Member "": the whole of Type at offset 0
	Info         bool   // the member lies in INFO's return buffer
	FD           bool   // plant a real descriptor (EXPORT_DMABUF_FD)
	Val          uint64 // the planted value
	Result       string // the name Call returns it under
}

func reqExpr(g Gen, ioctl string) string {
	if g.DRM {
		return "DRM_IOCTL_HL_" + ioctl
	}
	return "HL_IOCTL_" + ioctl
}

func memberExprs(typ, member string) []string {
	if member == "" {
		return []string{"sizeof(" + typ + ")"}
	}
	return []string{offExpr(typ, member), sizeExpr(typ, member)}
}

func memberSpan(hdr map[string]uint64, typ, member string) (off, size uint64) {
	if member == "" {
		return 0, hdr["sizeof("+typ+")"]
	}
	return hdr[offExpr(typ, member)], hdr[sizeExpr(typ, member)]
}

func (p Probe) exprs(g Gen) []string {
	e := []string{reqExpr(g, p.Ioctl), offExpr("struct hl_info_args", "return_pointer"), offExpr("struct hl_info_args", "return_size")}
	for _, in := range p.In {
		e = append(e, memberExprs(in.Type, in.Member)...)
		for _, c := range []string{in.WantC, in.MaskC} {
			if c != "" {
				e = append(e, c)
			}
		}
	}
	for _, o := range p.Out {
		e = append(e, memberExprs(o.Type, o.Member)...)
	}
	return e
}

func (p Probe) run(g Gen, hdr map[string]uint64) []Fact {
	num := hlsys.Legacy
	if g.DRM {
		num = hlsys.Accel
	}
	r := &recorder{num: num, hdr: hdr, outs: p.Out}
	res, err := p.Call(r)
	r.closeUnclaimed(res)
	key := func(s string) string { return fmt.Sprintf("probe %s: %s", p.Name, s) }
	if err != nil {
		return []Fact{{Key: key(fmt.Sprintf("call failed: %v", err)), Go: 1}}
	}
	if r.calls != 1 {
		return []Fact{{Key: key(fmt.Sprintf("%d ioctls instead of 1", r.calls)), Header: 1, Go: uint64(r.calls)}}
	}
	facts := []Fact{{Key: key("request " + reqExpr(g, p.Ioctl)), Header: hdr[reqExpr(g, p.Ioctl)], Go: uint64(r.req)}}
	for _, in := range p.In {
		off, size := memberSpan(hdr, in.Type, in.Member)
		got := readLE(r.arg, off, size)
		want := in.Want
		switch {
		case in.WantC != "":
			want = hdr[in.WantC]
		case in.WantResult != "":
			want = res[in.WantResult]
		}
		if in.MaskC != "" {
			got &= hdr[in.MaskC]
		}
		if in.AtLeast && got > want {
			got = want
		}
		facts = append(facts, Fact{Key: key(fmt.Sprintf("input in %s.%s", in.Type, in.Member)), Header: want, Go: got})
	}
	for _, o := range p.Out {
		_, size := memberSpan(hdr, o.Type, o.Member)
		want := r.planted[o.Result] & widthMask(size)
		facts = append(facts, Fact{Key: key(fmt.Sprintf("output %q from %s.%s", o.Result, o.Type, o.Member)), Header: want, Go: res[o.Result]})
	}
	return facts
}

func widthMask(size uint64) uint64 {
	if size >= 8 {
		return ^uint64(0)
	}
	return 1<<(8*size) - 1
}

func readLE(b []byte, off, size uint64) uint64 {
	if off+size > uint64(len(b)) || size > 8 {
		return ^uint64(0)
	}
	var buf [8]byte
	copy(buf[:], b[off:off+size])
	return binary.LittleEndian.Uint64(buf[:])
}

func writeLE(b []byte, off, size, v uint64) bool {
	if off+size > uint64(len(b)) || size > 8 {
		return false
	}
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], v)
	copy(b[off:off+size], buf[:size])
	return true
}

// recorder is an hlsys.Backend that records the one ioctl a probe makes
// and answers it by planting the probe's output values.
type recorder struct {
	num     hlsys.Numbering
	hdr     map[string]uint64
	outs    []Out
	calls   int
	req     uintptr
	arg     []byte
	planted map[string]uint64
	fds     []int
}

func (r *recorder) Ioctl(req uintptr, arg unsafe.Pointer) error {
	r.calls++
	r.req = req
	n := int(req>>16) & 0x3fff
	if arg == nil || n == 0 {
		return unix.EINVAL
	}
	buf := unsafe.Slice((*byte)(arg), n)
	r.arg = append([]byte(nil), buf...)
	r.planted = map[string]uint64{}
	for _, o := range r.outs {
		v := o.Val
		if o.FD {
			fd, err := unix.Dup(int(os.Stderr.Fd()))
			if err != nil {
				return err
			}
			r.fds = append(r.fds, fd)
			v = uint64(fd)
		}
		r.planted[o.Result] = v
		off, size := memberSpan(r.hdr, o.Type, o.Member)
		if !o.Info {
			if !writeLE(buf, off, size, v) {
				return unix.EFAULT
			}
			continue
		}
		// INFO: the member lies in the user buffer at return_pointer.
		ptr := readLE(buf, r.hdr[offExpr("struct hl_info_args", "return_pointer")], 8)
		rsize := readLE(buf, r.hdr[offExpr("struct hl_info_args", "return_size")], 4)
		if off+size > rsize {
			return unix.EFAULT
		}
		var val [8]byte
		binary.LittleEndian.PutUint64(val[:], v)
		local := [1]unix.Iovec{{Base: &val[0]}}
		local[0].SetLen(int(size))
		remote := [1]unix.RemoteIovec{{Base: uintptr(ptr + off), Len: int(size)}}
		if _, err := unix.ProcessVMWritev(os.Getpid(), local[:], remote[:], 0); err != nil {
			return err
		}
	}
	return nil
}

// closeUnclaimed closes planted descriptors the call did not take over.
func (r *recorder) closeUnclaimed(res map[string]uint64) {
	for _, fd := range r.fds {
		taken := false
		for _, o := range r.outs {
			if o.FD && res[o.Result] == uint64(fd) {
				taken = true
			}
		}
		if !taken {
			_ = unix.Close(fd)
		}
	}
}

func (r *recorder) Mmap(int64, int) ([]byte, error) { return nil, unix.ENODEV }
func (r *recorder) Munmap([]byte) error             { return unix.EINVAL }
func (r *recorder) Close() error                    { return nil }
func (r *recorder) Numbering() hlsys.Numbering      { return r.num }
func (r *recorder) Name() string                    { return "uapicheck recorder" }
func (r *recorder) Emulated() bool                  { return true }
