//go:build !linux

package memcache

import "unsafe"

// adviseHuge does nothing outside Linux: the table keeps the pages the Go
// heap gives it.
func adviseHuge(unsafe.Pointer, uintptr) {}
