// Package hlsys is the habanalabs kernel-driver uAPI in Go: struct layouts,
// constants, both ioctl numberings and one typed function per ioctl.
//
// Layouts follow include/uapi/misc/habanalabs.h (kernels up to 6.6, checked
// against the 6.1 header) and its successor include/uapi/drm/
// habanalabs_accel.h (6.7 and later, checked against the 6.12 header). The
// tests in internal/hlsys/uapicheck compile probes against both real
// headers and compare every struct size, field offset and width, constant,
// request number, and the union member each typed call fills and reads.
//
// Every call goes through a [Backend]: either a real device node ([OpenFD])
// or the emulator in package dma/hlsim. The node decides the numbering: a
// /dev/hlN node (kernels up to 6.6) takes the legacy 'H' requests, a
// /dev/accel/accelN node (6.7 and later) the DRM ones; the two are never
// mixed.
//
// User pointers (__u64 fields holding addresses) are filled from Go slices
// or unsafe.Pointers inside the typed functions, which keep the referenced
// memory alive with runtime.KeepAlive until the ioctl returns. Errors are
// *Error values wrapping the errno, so callers use errors.Is(err, unix.EBUSY).
package hlsys
