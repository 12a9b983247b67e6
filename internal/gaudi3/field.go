package gaudi3

import "fmt"

// Field is a bit field of a 32-bit register or packet dword: its lowest
// bit (Shift) and its width in bits. It is a constant (shift<<8 | width).
type Field uint16

// F returns the field of width bits starting at bit shift.
func F(shift, width uint) Field {
	if width == 0 || shift+width > 32 {
		panic(fmt.Sprintf("gaudi3: bad field shift %d width %d", shift, width))
	}
	return Field(shift<<8 | width)
}

// Shift is the field's lowest bit.
func (f Field) Shift() uint { return uint(f >> 8) }

// Width is the field's width in bits.
func (f Field) Width() uint { return uint(f & 0xff) }

// Max is the largest value the field holds.
func (f Field) Max() uint32 { return uint32(1<<f.Width() - 1) }

// Mask is the field's bits in place.
func (f Field) Mask() uint32 { return f.Max() << f.Shift() }

// Get extracts the field from w.
func (f Field) Get(w uint32) uint32 { return w >> f.Shift() & f.Max() }

// Put returns w with the field set to v; bits of v beyond the width are
// dropped (callers check with Fits first).
func (f Field) Put(w, v uint32) uint32 { return w&^f.Mask() | v&f.Max()<<f.Shift() }

// Fits reports whether v fits in the field.
func (f Field) Fits(v uint64) bool { return v <= uint64(f.Max()) }

func (f Field) String() string {
	return fmt.Sprintf("[%d:%d]", f.Shift()+f.Width()-1, f.Shift())
}
