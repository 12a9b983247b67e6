package engine

import (
	"context"
	"testing"
)

// BenchmarkCopyInline64B: 64-byte host-to-host Copy calls, which complete
// on the caller's goroutine (the path the close gate guards), from every
// core at once.
func BenchmarkCopyInline64B(b *testing.B) {
	e := newEngine(b, Config{Devices: DevicesNone})
	src, _ := e.Alloc(64<<10, Host)
	dst, _ := e.Alloc(64<<10, Host)
	ctx := context.Background()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := e.Copy(ctx, dst.Slice(0, 64), src.Slice(0, 64)).Err(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
