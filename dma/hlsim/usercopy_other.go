//go:build !amd64

package hlsim

// userCopyArch: copyIn uses readHost here.
const userCopyArch = false

func userCopy(dst *byte, src uintptr, n uintptr) { panic("hlsim: userCopy on this architecture") }
