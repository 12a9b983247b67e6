package hlsim

const userCopyArch = true

// userCopy copies n bytes from address src to dst (REP MOVSB). A fault
// on src is a memory fault in this goroutine (see faultSafe).
//
//go:noescape
func userCopy(dst *byte, src uintptr, n uintptr)
