package hlsys

import "testing"

// FuzzDecodeRequest: the emulator decodes every ioctl request number user
// space passes (hlsim context.go, runtime.go). Decode accepts exactly the
// twelve numbers Request makes, and maps each back to what made it.
func FuzzDecodeRequest(f *testing.F) {
	known := map[uintptr][2]int{}
	for _, n := range []Numbering{Legacy, Accel} {
		for i := range argSizes {
			known[n.Request(i)] = [2]int{int(n), i}
			f.Add(uint64(n.Request(i)))
		}
	}
	f.Add(uint64(0))
	f.Add(^uint64(0))
	f.Fuzz(func(t *testing.T, v uint64) {
		req := uintptr(v)
		n, nr, ok := Decode(req)
		want, isKnown := known[req]
		if ok != isKnown {
			t.Fatalf("Decode(%#x) ok %v, a request number Request makes: %v", req, ok, isKnown)
		}
		if ok && (int(n) != want[0] || nr != want[1]) {
			t.Fatalf("Decode(%#x) = %v %d, made by %v %d", req, n, nr, Numbering(want[0]), want[1])
		}
		if !ok && (n != 0 || nr != 0) {
			t.Fatalf("Decode(%#x) refused with %v %d", req, n, nr)
		}
	})
}
