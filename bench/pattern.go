package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/gxfer/gxfer/engine"
)

// patternByte is byte i of the test pattern for seed: never constant,
// never zero, and different for every seed. Its complement differs from
// it in every byte, so a destination filled with the complement cannot
// pass verification unless the bytes moved.
func patternByte(seed byte, i int) byte { return byte(i*131+i>>8+i>>16) ^ seed | 1 }

func fillPattern(p []byte, seed byte, complement bool) {
	var x byte
	if complement {
		x = 0xff
	}
	for i := range p {
		p[i] = patternByte(seed, i) ^ x
	}
}

// span is a byte range [Off, Off+N) left out of a check.
type span struct{ Off, N int }

// checkPattern returns an error naming the first byte of p that is not
// the pattern, outside skip.
func checkPattern(p []byte, seed byte, skip span, what string) error {
	for i, v := range p {
		if i >= skip.Off && i < skip.Off+skip.N {
			continue
		}
		if want := patternByte(seed, i); v != want {
			return fmt.Errorf("verification failed: %s %s byte %d is %#02x, want %#02x", FormatSize(len(p)), what, i, v, want)
		}
	}
	return nil
}

// fillBuffer fills b with the pattern (or its complement); Gaudi memory
// is filled through a host staging buffer.
func fillBuffer(ctx context.Context, eng *engine.Engine, b *engine.Buffer, seed byte, complement bool) (err error) {
	if !b.Location().IsGaudi() {
		fillPattern(b.Bytes(), seed, complement)
		return nil
	}
	stage, err := eng.Alloc(b.Size(), engine.Host)
	if err != nil {
		return fmt.Errorf("allocate staging buffer: %w", err)
	}
	defer func() { err = errors.Join(err, stage.Free()) }()
	fillPattern(stage.Bytes(), seed, complement)
	return eng.CopySync(ctx, b.All(), stage.All())
}

// checkBuffer verifies that b holds the pattern outside skip; Gaudi memory
// is read back through a host staging buffer.
func checkBuffer(ctx context.Context, eng *engine.Engine, b *engine.Buffer, seed byte, skip span, what string) (err error) {
	if !b.Location().IsGaudi() {
		return checkPattern(b.Bytes(), seed, skip, what)
	}
	stage, err := eng.Alloc(b.Size(), engine.Host)
	if err != nil {
		return fmt.Errorf("allocate staging buffer: %w", err)
	}
	defer func() { err = errors.Join(err, stage.Free()) }()
	if err := eng.CopySync(ctx, stage.All(), b.All()); err != nil {
		return fmt.Errorf("read back %s: %w", what, err)
	}
	return checkPattern(stage.Bytes(), seed, skip, what)
}
