package soak

import "encoding/binary"

// The data every operation moves is a pattern of a per-operation seed: the
// byte at position p of a pattern is byte p%8 of word(seed, p/8), so any
// window of it can be generated or checked without storing it, and data
// of another operation (another seed) or another place (another p) does
// not match.

// word is splitmix64 of the seed and the word index.
func word(seed uint64, i uint64) uint64 {
	z := seed + (i+1)*0x9E3779B97F4A7C15
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// fill writes the pattern of seed at positions [pos, pos+len(b)) into b.
func fill(b []byte, seed uint64, pos int) {
	p := uint64(pos)
	i := 0
	for i < len(b) && (p+uint64(i))%8 != 0 {
		q := p + uint64(i)
		b[i] = byte(word(seed, q/8) >> (8 * (q % 8)))
		i++
	}
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], word(seed, (p+uint64(i))/8))
	}
	for ; i < len(b); i++ {
		q := p + uint64(i)
		b[i] = byte(word(seed, q/8) >> (8 * (q % 8)))
	}
}

// check returns the index of the first byte of b that is not the pattern
// of seed at [pos, pos+len(b)), or -1.
func check(b []byte, seed uint64, pos int) int {
	p := uint64(pos)
	i := 0
	for i < len(b) && (p+uint64(i))%8 != 0 {
		q := p + uint64(i)
		if b[i] != byte(word(seed, q/8)>>(8*(q%8))) {
			return i
		}
		i++
	}
	for ; i+8 <= len(b); i += 8 {
		if binary.LittleEndian.Uint64(b[i:]) != word(seed, (p+uint64(i))/8) {
			for j := range 8 {
				q := p + uint64(i+j)
				if b[i+j] != byte(word(seed, q/8)>>(8*(q%8))) {
					return i + j
				}
			}
		}
	}
	for ; i < len(b); i++ {
		q := p + uint64(i)
		if b[i] != byte(word(seed, q/8)>>(8*(q%8))) {
			return i
		}
	}
	return -1
}

// nonZero returns the index of the first non-zero byte of b, or -1.
func nonZero(b []byte) int {
	i := 0
	for ; i+8 <= len(b); i += 8 {
		if binary.LittleEndian.Uint64(b[i:]) != 0 {
			break
		}
	}
	for ; i < len(b); i++ {
		if b[i] != 0 {
			return i
		}
	}
	return -1
}

// findWord returns k < n such that word(seed, k) == w, or -1.
func findWord(seed, w uint64, n int) int {
	for k := range n {
		if word(seed, uint64(k)) == w {
			return k
		}
	}
	return -1
}
