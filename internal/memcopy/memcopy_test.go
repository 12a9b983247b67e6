package memcopy

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// pattern fills b with bytes that differ from their neighbours and from
// the same offset of another seed.
func pattern(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*131+i>>8) ^ seed
	}
}

var alignPairs = [][2]int{{0, 0}, {1, 0}, {0, 1}, {3, 7}, {31, 1}, {33, 17}, {63, 64}, {5, 32}}

// checkCopy copies n bytes with k from src+so to dst+do and checks the
// bytes copied and the guard bytes around the destination.
func checkCopy(t *testing.T, cpu CPU, k Kernel, n, so, do int) {
	t.Helper()
	const guard = 64
	src := make([]byte, n+so+guard)
	dst := make([]byte, n+do+2*guard)
	pattern(src, 0x5a)
	pattern(dst, 0xa5)
	want := bytes.Clone(dst)
	copy(want[guard+do:], src[so:so+n])
	got := Run(k, cpu, dst[guard+do:guard+do+n], src[so:so+n])
	if got != n || !bytes.Equal(dst, want) {
		i := 0
		for i < len(dst) && dst[i] == want[i] {
			i++
		}
		t.Fatalf("%s n=%d src+%d dst+%d: returned %d, first wrong byte at %d of dst (guard %d)", k, n, so, do, got, i, guard)
	}
}

func TestKernelsByteExact(t *testing.T) {
	cpu := detectCPU()
	for _, k := range Kernels() {
		t.Run(k.String(), func(t *testing.T) {
			if !cpu.Has(k) {
				t.Skipf("%s not on this CPU (runs as copy)", k)
			}
			for n := 0; n <= 4096; n++ { // every size, alignments in turn
				p := alignPairs[n%len(alignPairs)]
				checkCopy(t, cpu, k, n, p[0], p[1])
			}
			for _, n := range []int{0, 1, 31, 32, 33, 127, 128, 129, 255, 256, 257, 289, 1000, 4095, 4096} {
				for _, p := range alignPairs { // every alignment at the edges
					checkCopy(t, cpu, k, n, p[0], p[1])
				}
			}
			for _, n := range []int{1<<20 - 1, 1 << 20, 1<<20 + 13, 3<<20 + 7, 16<<20 + 5} {
				checkCopy(t, cpu, k, n, 3, 17)
				checkCopy(t, cpu, k, n, 0, 0)
			}
		})
	}
}

func TestRunShorter(t *testing.T) {
	cpu := detectCPU()
	for _, k := range Kernels() {
		dst, src := make([]byte, 100), make([]byte, 300)
		pattern(src, 1)
		require.Equal(t, 100, Run(k, cpu, dst, src), k.String())
		require.Equal(t, src[:100], dst, k.String())
		require.Equal(t, 100, Run(k, cpu, src[:300], dst), k.String())
	}
}

func TestPolicy(t *testing.T) {
	caches := func(llc, sharers int) Caches {
		return Caches{{Level: 1, Size: 32 << 10, Sharers: 1}, {Level: 2, Size: 512 << 10, Sharers: 1}, {Level: 3, Size: llc, Sharers: sharers}}
	}
	amd := CPU{Vendor: "AuthenticAMD", Family: 0x19, AVX2: true, ERMS: true, FSRM: true}
	zen5 := CPU{Vendor: "AuthenticAMD", Family: 0x1A, AVX2: true, ERMS: true, FSRM: true}
	zen5L1 := zen5
	zen5L1.L1D = 48 << 10
	zen5NoFSRM := CPU{Vendor: "AuthenticAMD", Family: 0x1A, AVX2: true, ERMS: true}
	intel := CPU{Vendor: "GenuineIntel", Family: 6, AVX2: true, ERMS: true, FSRM: true}
	intelNoFSRM := CPU{Vendor: "GenuineIntel", AVX2: true, ERMS: true}
	for _, tc := range []struct {
		name  string
		m     Machine
		nt    int
		want  Policy
		sizes map[int]Kernel
	}{
		{"amd-epyc-2cpu", Machine{amd, caches(32<<20, 2)}, 0, Policy{TemporalFrom: 1 << 20, Temporal: AVX2, NTFrom: 4 << 20},
			map[int]Kernel{0: Go, 64 << 10: Go, 1<<20 - 1: Go, 1 << 20: AVX2, 4<<20 - 1: AVX2, 4 << 20: NonTemporal, 64 << 20: NonTemporal}},
		{"amd-override", Machine{amd, caches(32<<20, 2)}, 2 << 20, Policy{TemporalFrom: 1 << 20, Temporal: AVX2, NTFrom: 2 << 20},
			map[int]Kernel{1 << 20: AVX2, 2 << 20: NonTemporal}},
		{"amd-never-nt", Machine{amd, caches(32<<20, 2)}, -1, Policy{TemporalFrom: 1 << 20, Temporal: AVX2},
			map[int]Kernel{512: Go, 1 << 20: AVX2, 1 << 30: AVX2}},
		{"amd-small-llc", Machine{amd, caches(8<<20, 16)}, 0, Policy{TemporalFrom: 1 << 20, Temporal: AVX2, NTFrom: 128 << 10},
			map[int]Kernel{100 << 10: Go, 128 << 10: NonTemporal, 1 << 20: NonTemporal}},
		{"amd-zen5", Machine{zen5, caches(32<<20, 2)}, 0, Policy{TemporalFrom: 16 << 10, Temporal: RepMovsbPieces, NTFrom: 4 << 20},
			map[int]Kernel{16<<10 - 1: Go, 16 << 10: RepMovsbPieces, 1 << 20: RepMovsbPieces, 4 << 20: NonTemporal}},
		{"amd-zen5-sysfs-l1-wins", Machine{zen5L1, caches(32<<20, 2)}, 0, Policy{TemporalFrom: 16 << 10, Temporal: RepMovsbPieces, NTFrom: 4 << 20},
			map[int]Kernel{16 << 10: RepMovsbPieces}},
		{"amd-zen5-cpuid-l1", Machine{zen5L1, nil}, 0, Policy{TemporalFrom: 24 << 10, Temporal: RepMovsbPieces, NTFrom: 24 << 20},
			map[int]Kernel{24<<10 - 1: Go, 24 << 10: RepMovsbPieces, 24<<20 - 1: RepMovsbPieces, 24 << 20: NonTemporal}},
		{"amd-zen5-cpuid-l1-never-nt", Machine{zen5L1, nil}, -1, Policy{TemporalFrom: 24 << 10, Temporal: RepMovsbPieces},
			map[int]Kernel{1 << 30: RepMovsbPieces}},
		{"amd-zen5-no-l1", Machine{zen5, nil}, 0, Policy{TemporalFrom: 1 << 20, Temporal: RepMovsbPieces, NTFrom: 24 << 20},
			map[int]Kernel{64 << 10: Go, 1 << 20: RepMovsbPieces, 1 << 30: NonTemporal}},
		{"amd-zen5-tiny-l1", Machine{CPU{Vendor: "AuthenticAMD", Family: 0x1A, AVX2: true, ERMS: true, FSRM: true, L1D: 2 << 10}, nil}, 0,
			Policy{TemporalFrom: 4096, Temporal: RepMovsbPieces, NTFrom: 24 << 20}, map[int]Kernel{4095: Go, 4096: RepMovsbPieces}},
		{"amd-zen3-cpuid-l1", Machine{CPU{Vendor: "AuthenticAMD", Family: 0x19, AVX2: true, ERMS: true, FSRM: true, L1D: 32 << 10}, nil}, 0,
			Policy{TemporalFrom: 1 << 20, Temporal: AVX2}, map[int]Kernel{64 << 10: Go, 1 << 20: AVX2}},
		{"amd-zen5-no-fsrm", Machine{zen5NoFSRM, nil}, 0, Policy{TemporalFrom: 1 << 20, Temporal: AVX2},
			map[int]Kernel{1 << 20: AVX2}},
		{"intel-erms-fsrm", Machine{intel, caches(64<<20, 2)}, 0, Policy{TemporalFrom: 1 << 20, Temporal: RepMovsb, NTFrom: 8 << 20, NTPages: true},
			map[int]Kernel{1<<20 - 1: Go, 1 << 20: RepMovsb, 8 << 20: NonTemporalPages}},
		{"intel-no-fsrm", Machine{intelNoFSRM, caches(32<<20, 2)}, 0, Policy{TemporalFrom: 1 << 20, Temporal: AVX2, NTFrom: 4 << 20},
			map[int]Kernel{1 << 20: AVX2}},
		{"no-caches", Machine{amd, nil}, 0, Policy{TemporalFrom: 1 << 20, Temporal: AVX2},
			map[int]Kernel{64 << 20: AVX2}},
		{"no-avx2", Machine{CPU{Vendor: "AuthenticAMD"}, caches(32<<20, 2)}, 0, Policy{Temporal: Go},
			map[int]Kernel{64 << 20: Go}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewPolicy(tc.m, tc.nt)
			require.Equal(t, tc.want, p)
			for n, k := range tc.sizes {
				require.Equal(t, k, p.Kernel(n), "size %d", n)
			}
			require.NotEmpty(t, p.String())
		})
	}
}

func TestDisplayFamily(t *testing.T) {
	for _, tc := range []struct {
		name string
		eax  uint32
		want int
	}{
		{"AMD EPYC 7763 (Zen 3)", 0x00A00F11, 0x19},
		{"AMD EPYC 9004 (Zen 4)", 0x00A10F11, 0x19},
		{"AMD Zen 5", 0x00B00F21, 0x1A},
		{"AMD EPYC 7002 (Zen 2)", 0x00830F10, 0x17},
		{"Intel Xeon (Sapphire Rapids)", 0x000806F8, 6},
		{"extended family ignored below 0xF", 0x00F00611, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, displayFamily(tc.eax))
		})
	}
}

func writeCache(t *testing.T, root string, idx, level int, typ, size, shared string) {
	d := filepath.Join(root, "sys/devices/system/cpu/cpu0/cache", fmt.Sprintf("index%d", idx))
	require.NoError(t, os.MkdirAll(d, 0o755))
	for name, v := range map[string]string{"level": fmt.Sprint(level), "type": typ, "size": size, "shared_cpu_list": shared} {
		require.NoError(t, os.WriteFile(filepath.Join(d, name), []byte(v+"\n"), 0o644))
	}
}

func TestReadCaches(t *testing.T) {
	root := t.TempDir()
	writeCache(t, root, 3, 3, "Unified", "32768K", "0-1")
	writeCache(t, root, 0, 1, "Data", "32K", "0")
	writeCache(t, root, 1, 1, "Instruction", "32K", "0")
	writeCache(t, root, 2, 2, "Unified", "512K", "0")
	cs, err := ReadCaches(root)
	require.NoError(t, err)
	require.Equal(t, Caches{{1, 32 << 10, 1}, {2, 512 << 10, 1}, {3, 32 << 20, 2}}, cs)
	require.Equal(t, Cache{3, 32 << 20, 2}, cs.LLC())
	require.Equal(t, Cache{2, 512 << 10, 1}, cs.Level(2))
	require.Equal(t, Cache{}, cs.Level(4))
	require.Equal(t, 4<<20, DefaultNTFrom(Machine{CPU{AVX2: true}, cs}))

	_, err = ReadCaches(t.TempDir())
	require.Error(t, err)
	require.Equal(t, Cache{}, Caches(nil).LLC())
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{{"32K", 32 << 10, true}, {"32768K", 32 << 20, true}, {"1M", 1 << 20, true}, {"2G", 2 << 30, true}, {"512", 512, true},
		{"", 0, false}, {"K", 0, false}, {"-1K", 0, false}, {"12Q", 0, false}, {"99999999999G", 0, false}} {
		got, err := ParseSize(tc.in)
		require.Equal(t, tc.ok, err == nil, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
	for _, tc := range []struct {
		in   string
		want int
		ok   bool
	}{{"0", 1, true}, {"0-1", 2, true}, {"0,2-5,7", 6, true}, {" 3\n", 1, true},
		{"", 0, false}, {"a", 0, false}, {"3-1", 0, false}, {"-1", 0, false}, {"0-2000000", 0, false}, {"1,", 0, false}} {
		got, err := CountCPUs(tc.in)
		require.Equal(t, tc.ok, err == nil, tc.in)
		require.Equal(t, tc.want, got, tc.in)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0-1", "0,2-5", "32768K", "1M", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if n, err := CountCPUs(s); err == nil && (n < 1 || n > 1<<20) {
			t.Fatalf("CountCPUs(%q) = %d", s, n)
		}
		if n, err := ParseSize(s); err == nil && (n < 0 || n > 1<<40) {
			t.Fatalf("ParseSize(%q) = %d", s, n)
		}
	})
}

func TestCopier(t *testing.T) {
	m := Machine{CPU: detectCPU(), Caches: Caches{{Level: 3, Size: 4 << 20, Sharers: 1}}}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"default", Config{Machine: &m}},
		{"split", Config{Machine: &m, Workers: 3, ParallelMin: 64 << 10}},
		{"split-nt", Config{Machine: &m, Workers: 2, ParallelMin: 64 << 10, NTFrom: 128 << 10}},
		{"never", Config{Machine: &m, Workers: 4, ParallelMin: -1, NTFrom: -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New(tc.cfg)
			require.NotEmpty(t, c.String())
			for _, n := range []int{0, 1, 4095, 64 << 10, 64<<10 + 1, 1<<20 + 5, 5<<20 + 3} {
				src, dst := make([]byte, n+1), make([]byte, n+1)
				pattern(src, byte(n))
				require.Equal(t, n, c.Copy(dst[1:], src[:n]))
				require.Equal(t, src[:n], dst[1:], "size %d", n)
			}
			// Overlapping ranges: memmove semantics, either direction.
			for _, n := range []int{100 << 10, 2 << 20} {
				b := make([]byte, n+4096)
				pattern(b, 9)
				want := bytes.Clone(b)
				copy(want[4096:], want[:n])
				c.Copy(b[4096:], b[:n])
				require.Equal(t, want, b)
				pattern(b, 9)
				want = bytes.Clone(b)
				copy(want[:n], want[4096:])
				c.Copy(b[:n], b[4096:])
				require.Equal(t, want, b)
			}
		})
	}
	var nilc *Copier
	dst := make([]byte, 8)
	require.Equal(t, 8, nilc.Copy(dst, []byte("abcdefgh")))
	require.Equal(t, "abcdefgh", string(dst))
	require.Equal(t, Policy{}, nilc.Policy())
	require.NotEmpty(t, nilc.String())
}

func TestDetect(t *testing.T) {
	m := Detect()
	c := New(Config{Machine: &m})
	t.Log(c)
	for _, k := range Kernels() {
		require.NotEmpty(t, k.String())
	}
	require.Equal(t, "kernel(9)", Kernel(9).String())
}

func TestCopyV(t *testing.T) {
	m := Machine{CPU: detectCPU(), Caches: Caches{{Level: 3, Size: 4 << 20, Sharers: 1}}}
	// piece sizes: empty pieces, odd sizes, pieces larger than a chunk
	lists := map[string][]int{
		"one":       {5<<20 + 3},
		"many-64k":  {64 << 10, 64 << 10, 64 << 10, 64 << 10, 64 << 10, 64 << 10, 64 << 10, 64 << 10},
		"mixed":     {0, 1, 4095, 0, 700 << 10, 33, 1<<20 + 5, 0, 3 << 20, 17},
		"empty":     {},
		"all-empty": {0, 0},
	}
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{"default", Config{Machine: &m}},
		{"split", Config{Machine: &m, Workers: 3, ParallelMin: 64 << 10}},
		{"split-nt", Config{Machine: &m, Workers: 2, ParallelMin: 64 << 10, NTFrom: 128 << 10}},
		{"never", Config{Machine: &m, Workers: 4, ParallelMin: -1, NTFrom: -1}},
	} {
		for name, sizes := range lists {
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				c := New(tc.cfg)
				total := 0
				for _, n := range sizes {
					total += n
				}
				// One source and one destination arena; pieces at
				// shuffled, unaligned places of the destination.
				src, dst := make([]byte, total+len(sizes)), make([]byte, total+2*len(sizes)+64)
				pattern(src, 3)
				pattern(dst, 7)
				want := bytes.Clone(dst)
				srcs, dsts := make([][]byte, len(sizes)), make([][]byte, len(sizes))
				so, do := 0, 64
				for i := len(sizes) - 1; i >= 0; i-- { // destinations in reverse order
					n := sizes[i]
					srcs[i] = src[so : so+n]
					dsts[i] = dst[do : do+n]
					copy(want[do:do+n], src[so:so+n])
					so += n + 1
					do += n + 2
				}
				require.Equal(t, total, c.CopyV(dsts, srcs))
				require.True(t, bytes.Equal(want, dst), "bytes differ")
			})
		}
	}
	// A shorter source copies min(len) bytes, as copy() does.
	c := New(Config{Machine: &m, Workers: 2, ParallelMin: 1})
	d1, d2 := make([]byte, 10), make([]byte, 3)
	require.Equal(t, 6, c.CopyV([][]byte{d1, d2}, [][]byte{[]byte("abc"), []byte("defgh")}))
	require.Equal(t, "abc", string(d1[:3]))
	require.Equal(t, "def", string(d2))
	// An overlapping piece: memmove semantics, the list not split.
	b := make([]byte, 2<<20+4096)
	pattern(b, 9)
	want := bytes.Clone(b)
	copy(want[4096:], want[:2<<20])
	other, otherSrc := make([]byte, 1<<20), make([]byte, 1<<20)
	pattern(otherSrc, 4)
	require.Equal(t, 3<<20, c.CopyV([][]byte{b[4096:], other}, [][]byte{b[:2<<20], otherSrc}))
	require.Equal(t, want, b)
	require.Equal(t, otherSrc, other)
	// nil copier, mismatched lists.
	var nilc *Copier
	require.Equal(t, 6, nilc.CopyV([][]byte{d1, d2}, [][]byte{[]byte("xyz"), []byte("uvw")}))
	require.Equal(t, "xyz", string(d1[:3]))
	require.Panics(t, func() { c.CopyV([][]byte{d1}, nil) })
}

// TestSmall: Small is true exactly where Copy takes copy() whatever the
// ranges: below the temporal kernel's threshold and, with workers, the
// split's.
func TestSmall(t *testing.T) {
	amd := CPU{Vendor: "AuthenticAMD", AVX2: true, ERMS: true, FSRM: true}
	m := Machine{CPU: amd, Caches: Caches{{Level: 2, Size: 512 << 10, Sharers: 1}, {Level: 3, Size: 32 << 20, Sharers: 2}}}
	var nilCopier *Copier
	require.True(t, nilCopier.Small(1<<30), "nil copies with copy()")
	for _, tc := range []struct {
		name string
		cfg  Config
		n    int
		want bool
	}{
		{"8 B", Config{Machine: &m, Workers: 2}, 8, true},
		{"below the temporal kernel", Config{Machine: &m, Workers: 2}, 1<<20 - 1, true},
		{"temporal kernel", Config{Machine: &m, Workers: 2}, 1 << 20, false},
		{"non-temporal", Config{Machine: &m, Workers: 2}, 8 << 20, false},
		{"split, no AVX2", Config{Machine: &Machine{}, Workers: 2, ParallelMin: 64 << 10}, 64 << 10, false},
		{"no split, no AVX2", Config{Machine: &Machine{}, Workers: 1}, 64 << 20, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, New(tc.cfg).Small(tc.n))
		})
	}
}
