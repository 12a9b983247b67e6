package main

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"github.com/gxfer/gxfer/engine"
)

// The patterns of the KV-cache workload's blocks and the target's check
// of a request (perf_kv.go).

// fillBlock writes the pattern of block i of request r into b (a multiple
// of 8 bytes, 8-byte aligned).
func fillBlock(b []byte, seed, r uint64, i int) {
	w := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
	x := blockSeed(seed, r, i)
	for j := range w {
		w[j] = x + uint64(j)*0x9e3779b97f4a7c15
	}
}

// checkBlock returns the offset of the first byte of b that is not the
// pattern of block i of request r, or -1.
func checkBlock(b []byte, seed, r uint64, i int) int {
	w := unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/8)
	x := blockSeed(seed, r, i)
	for j := range w {
		if w[j] != x+uint64(j)*0x9e3779b97f4a7c15 {
			return j * 8
		}
	}
	return -1
}

func blockSeed(seed, r uint64, i int) uint64 {
	x := seed ^ (r+1)*0xbf58476d1ce4e5b9 ^ uint64(i+1)*0x94d049bb133111eb
	x ^= x >> 31
	return x * 0xd6e8feb96a8d6a4d
}

// errNotInPlace: a request's bytes were not in place when its
// notification arrived.
var errNotInPlace = errors.New("data not in place when the notification arrived")

// check verifies the blocks of request m.
func (t *kvTarget) check(ctx context.Context, m kvMsg, perm []int) error {
	return checkRequest(ctx, t.a.Engine(), t.buf, t.scratch, m, perm)
}

// checkRequest verifies the blocks of request m in buf (from m.base on);
// scratch is a host buffer of a block at least, for gaudi memory.
func checkRequest(ctx context.Context, eng *engine.Engine, buf, scratch *engine.Buffer, m kvMsg, perm []int) error {
	if end := m.base + uint64(m.p.sectionLen()); end > uint64(buf.Size()) || end < m.base {
		return fmt.Errorf("request %d: blocks beyond the section (%d bytes from %d, section of %d)", m.r, m.p.sectionLen(), m.base, buf.Size())
	}
	for i := range m.p.blocks {
		off := int(m.base) + m.p.slot(m.r, i, perm)*m.p.bsize
		var b []byte
		if buf.Location() == engine.Host {
			b = buf.Bytes()[off : off+m.p.bsize]
		} else {
			if err := eng.CopySync(ctx, scratch.Slice(0, m.p.bsize), buf.Slice(off, m.p.bsize)); err != nil {
				return fmt.Errorf("read block %d back: %w", i, err)
			}
			b = scratch.Bytes()[:m.p.bsize]
		}
		if at := checkBlock(b, m.p.seed, m.r, i); at >= 0 {
			return fmt.Errorf("block %d (offset %d): byte %d differs: %w", i, off, at, errNotInPlace)
		}
	}
	return nil
}
