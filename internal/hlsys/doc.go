// Package hlsys is the habanalabs kernel-driver uAPI in Go: struct layouts,
// constants, both ioctl numberings and one typed function per ioctl.
//
// Layouts follow include/uapi/misc/habanalabs.h (kernel 6.1) and its
// successor include/uapi/drm/habanalabs_accel.h; a test compiled with cgo
// against the installed kernel header checks every size, offset and request
// number used here.
//
// Every call goes through a [Backend]: either a real device node ([OpenFD])
// or the emulator in package dma/hlsim. The node decides the numbering: a
// /dev/hlN node takes the legacy 'H' requests, a /dev/accel/accelN node the
// DRM ones; the two are never mixed.
//
// User pointers (__u64 fields holding addresses) are filled from Go slices
// or unsafe.Pointers inside the typed functions, which keep the referenced
// memory alive with runtime.KeepAlive until the ioctl returns. Errors are
// *Error values wrapping the errno, so callers use errors.Is(err, unix.EBUSY).
package hlsys
