// Package memcopy copies host memory with a kernel chosen by size and by
// the machine: the runtime's memmove (copy), a 32-byte AVX2 loop with
// ordinary (temporal) stores, a non-temporal loop (VMOVNTDQ + SFENCE) and
// REP MOVSB, the last three in Go assembly on amd64 (copy everywhere
// else).
//
// Why not always copy(): Go's memmove on amd64 switches its AVX path to
// non-temporal stores at 1 MiB on every CPU that is not an Intel one with
// ERMS and FSRM (runtime/cpuflags_amd64.go, memmove_amd64.s: CMPQ BX,
// $0x100000; JAE gobble_big_data_fwd). Non-temporal stores bypass the
// caches: right for a copy larger than the cache share it would evict,
// wrong for a 1 MiB copy whose destination is read next (a peer's mapped
// buffer, or the next put of the same one), which glibc's memcpy keeps in
// cache up to its non-temporal threshold. A Policy moves that switch to a
// size derived from the cache hierarchy (docs/copy-kernels.md has the
// measurements that chose it).
//
// Copies are between non-overlapping ranges; a Copier falls back to copy()
// (memmove) for overlapping ones, the kernels themselves never see them.
package memcopy

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Kernel is one way of copying bytes.
type Kernel uint8

const (
	Go          Kernel = iota // copy(): the runtime's memmove
	AVX2                      // 32-byte AVX2 loads and temporal stores
	NonTemporal               // AVX2 loads, VMOVNTDQ stores, SFENCE
	RepMovsb                  // REP MOVSB
	// RepMovsbPieces is REP MOVSB in pieces of at most RepPiece bytes:
	// a Zen 5's microcode stores one of 4 MiB or more non-temporally
	// (docs/copy-kernels.md), the pieces stay under that.
	RepMovsbPieces
	// NonTemporalPages stores non-temporally, as NonTemporal, over four
	// 4 KiB pages at once (glibc's large_memcpy_4x's access pattern).
	NonTemporalPages
)

// RepPiece is RepMovsbPieces' largest piece: measured temporal on a Zen
// 5 up to a REP MOVSB of 3 MiB, non-temporal from 4 MiB.
const RepPiece = 2 << 20

// Kernels lists every kernel.
func Kernels() []Kernel {
	return []Kernel{Go, AVX2, NonTemporal, RepMovsb, RepMovsbPieces, NonTemporalPages}
}

func (k Kernel) String() string {
	switch k {
	case Go:
		return "go-copy"
	case AVX2:
		return "avx2"
	case NonTemporal:
		return "non-temporal"
	case RepMovsb:
		return "rep-movsb"
	case RepMovsbPieces:
		return "rep-movsb-2m"
	case NonTemporalPages:
		return "non-temporal-4p"
	}
	return fmt.Sprintf("kernel(%d)", uint8(k))
}

// CPU is what the kernel choice needs to know of the processor.
type CPU struct {
	Vendor           string // CPUID vendor: "AuthenticAMD", "GenuineIntel"; "" off amd64
	Family           int    // CPUID leaf 1 display family (base + extended); 0 off amd64
	AVX2, ERMS, FSRM bool
	// L1D is the L1 data cache size CPUID reports (AMD: Fn8000_0005 ECX
	// bits 31-24, in KiB), 0 if unknown; the sysfs figure, when there
	// is one, takes precedence (Machine.l1d).
	L1D int
}

// displayFamily is the family of a CPUID leaf 1 EAX: the base family
// (bits 8-11), plus the extended family (bits 20-27) when the base is 0xF
// (Intel SDM vol. 2A, CPUID, "Processor Version Information"; AMD's
// CPUID Specification, Fn0000_0001_EAX).
func displayFamily(eax uint32) int {
	f := int(eax>>8) & 0xF
	if f == 0xF {
		f += int(eax>>20) & 0xFF
	}
	return f
}

// Has says whether k runs on this CPU.
func (c CPU) Has(k Kernel) bool { return c.has(k) }

// GoNTFrom is the size from which Go's copy() may use non-temporal
// stores on this CPU, 0 if it never does: 1 MiB with AVX
// (runtime/memmove_amd64.s: CMPQ BX, $0x100000; JAE gobble_big_data_fwd
// on its AVX path). That path takes every copy of 256 bytes or more
// unless the CPU is an Intel one with ERMS and FSRM
// (runtime/cpuflags_amd64.go: isERMSNiceCPU := isIntel), and even there
// every forward copy whose destination is not 16-byte aligned.
func (c CPU) GoNTFrom() int {
	if !c.AVX2 {
		return 0
	}
	return 1 << 20
}

// amdZen5 is AMD's family 0x1A (Zen 5).
const amdZen5 = 0x1A

// repMovsNice is where Go itself prefers REP MOVS (Intel, ERMS, FSRM;
// runtime/cpuflags_amd64.go): REP MOVSB is the temporal kernel there.
func (c CPU) repMovsNice() bool { return c.Vendor == "GenuineIntel" && c.ERMS && c.FSRM }

// repMovsFast is an AMD CPU, from family 0x1A (Zen 5), with ERMS and
// FSRM: REP MOVSB was measured there the fastest copy from where a
// copy's source and destination outgrow the L1 data cache (1.7x copy()
// at 32 KiB, 1.3x at 64 KiB) up to 64 MiB (1.06-1.4x avx2 from 1 MiB),
// and copy() the fastest below (docs/copy-kernels.md, "AMD EPYC, family
// 26"); one REP MOVSB of 4 MiB or more stores non-temporally there, so
// the temporal kernel is RepMovsbPieces. On the AMD family 0x19 part
// measured (Zen 3) REP MOVSB was 0.86x avx2 at 1 MiB and 0.76x at 4 MiB,
// as glibc's rep_movsb_stop_threshold (the L2 size on AMD) expects;
// family 0x19's Zen 4 models were not measured and keep avx2.
func (c CPU) repMovsFast() bool {
	return c.Vendor == "AuthenticAMD" && c.Family >= amdZen5 && c.ERMS && c.FSRM
}

// Machine is a CPU and its cache hierarchy.
type Machine struct {
	CPU    CPU
	Caches Caches // nil if sysfs had none
}

// l1d is the L1 data cache's size: sysfs's, else CPUID's, else 0.
func (m Machine) l1d() int {
	if c := m.Caches.Level(1); c.Size > 0 {
		return c.Size
	}
	return m.CPU.L1D
}

// Detect reads this machine's CPU and caches (sysfs under "/").
func Detect() Machine {
	cs, _ := ReadCaches("/")
	return Machine{CPU: detectCPU(), Caches: cs}
}

// Policy picks a kernel by copy size: copy() below TemporalFrom, Temporal
// from there, NonTemporal (NonTemporalPages with NTPages) from NTFrom
// (when not 0).
type Policy struct {
	TemporalFrom int
	Temporal     Kernel
	NTFrom       int  // 0: never non-temporal
	NTPages      bool // the non-temporal kernel is NonTemporalPages
}

// DefaultNTFrom is the size from which the policy stores non-temporally on
// m: a quarter of one CPU's share of the last-level cache (its size over
// the CPUs sharing it), so that a temporal copy's source and destination
// fill at most half of that share. glibc 2.33-2.37 (sysdeps/x86/
// dl-cacheinfo.h: non_temporal_threshold = shared * 3 / 4) and UCX on AMD
// (L3 * 3/4) switch later; on the AMD EPYC measured (docs/copy-kernels.md)
// temporal and non-temporal tie at a quarter of the share (4 MiB) and
// temporal loses 43% at 16 MiB, so 3/4 (12 MiB) would leave sizes where
// it loses on the temporal side. Without cache information: 0 (never),
// except on a CPU whose temporal kernel is RepMovsbPieces (repMovsFast):
// zen5NTFrom, where a Zen 5 guest without sysfs caches measured the
// crossover between 12 and 24 MiB (docs/copy-kernels.md). 0 without
// AVX2.
func DefaultNTFrom(m Machine) int {
	llc := m.Caches.LLC()
	switch {
	case !m.CPU.AVX2:
		return 0
	case llc.Size == 0 && m.CPU.repMovsFast():
		return zen5NTFrom
	case llc.Size == 0:
		return 0
	}
	return llc.Size / max(llc.Sharers, 1) / 4
}

// zen5NTFrom is DefaultNTFrom on a Zen 5 without cache information: a
// unix put_bw of 16 MiB stored temporally ran 1.05x its non-temporal
// speed (3 of 3 interleaved rounds), one of 24 MiB 0.9x (2 of 2).
const zen5NTFrom = 24 << 20

// NewPolicy is the policy for m; ntFrom overrides DefaultNTFrom when not 0
// (negative: never non-temporal).
func NewPolicy(m Machine, ntFrom int) Policy {
	switch {
	case ntFrom == 0:
		ntFrom = DefaultNTFrom(m)
	case ntFrom < 0:
		ntFrom = 0
	}
	if !m.CPU.AVX2 {
		return Policy{Temporal: Go} // copy() throughout
	}
	p := Policy{Temporal: AVX2, TemporalFrom: m.CPU.GoNTFrom(), NTFrom: ntFrom}
	switch {
	case m.CPU.repMovsNice(): // what copy() does below 1 MiB, at any alignment
		p.Temporal = RepMovsb
		// Measured on an Intel Xeon guest (docs/copy-kernels.md, session
		// 35): from 4 MiB 1.5-2.0x NonTemporal, from memory and in cache.
		p.NTPages = true
	case m.CPU.repMovsFast():
		p.Temporal = RepMovsbPieces
		if l1 := m.l1d(); l1 > 0 { // from where source and destination outgrow the L1d
			p.TemporalFrom = min(p.TemporalFrom, max(l1/2, 4096))
		}
	}
	return p
}

// Kernel is the kernel for a copy of n bytes.
func (p Policy) Kernel(n int) Kernel {
	switch {
	case p.NTFrom > 0 && n >= p.NTFrom:
		return p.nt()
	case p.TemporalFrom > 0 && n >= p.TemporalFrom:
		return p.Temporal
	}
	return Go
}

// nt is the policy's non-temporal kernel.
func (p Policy) nt() Kernel {
	if p.NTPages {
		return NonTemporalPages
	}
	return NonTemporal
}

// String describes the policy ("go-copy <1 MiB, avx2 <4 MiB, non-temporal").
func (p Policy) String() string {
	var b strings.Builder
	lim := func(n int) string { return FormatSize(n) }
	switch {
	case p.TemporalFrom == 0 && p.NTFrom == 0:
		return Go.String()
	case p.NTFrom > 0 && (p.TemporalFrom == 0 || p.NTFrom <= p.TemporalFrom):
		fmt.Fprintf(&b, "%s <%s, %s", Go, lim(p.NTFrom), p.nt())
	case p.NTFrom == 0:
		fmt.Fprintf(&b, "%s <%s, %s", Go, lim(p.TemporalFrom), p.Temporal)
	default:
		fmt.Fprintf(&b, "%s <%s, %s <%s, %s", Go, lim(p.TemporalFrom), p.Temporal, lim(p.NTFrom), p.nt())
	}
	return b.String()
}

// FormatSize prints n bytes in binary units ("1 MiB", "12 MiB", "640 KiB").
func FormatSize(n int) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// Run copies min(len(dst), len(src)) bytes from src to dst with k, which
// must not overlap them; a kernel the CPU lacks runs as copy(). It
// returns the number of bytes copied.
func Run(k Kernel, cpu CPU, dst, src []byte) int {
	n := min(len(dst), len(src))
	if !cpu.has(k) {
		k = Go
	}
	run(k, dst[:n], src[:n])
	return n
}

// Config configures a Copier.
type Config struct {
	// NTFrom: see NewPolicy (0: from the cache hierarchy; negative:
	// never non-temporal).
	NTFrom int
	// Workers bounds the goroutines (cores) one large copy is split over;
	// 0: GOMAXPROCS; 1: never split.
	Workers int
	// ParallelMin is the size from which a copy is split (0: 4 MiB;
	// negative: never).
	ParallelMin int
	// Machine, if set, replaces Detect (tests).
	Machine *Machine
}

// Copier copies host memory with its Policy, splitting large copies over
// up to Workers cores. Safe for concurrent use; the zero value and nil
// copy with copy() only.
type Copier struct {
	m       Machine
	p       Policy
	workers int
	parMin  int
}

// New makes a Copier for this machine (or cfg.Machine).
func New(cfg Config) *Copier {
	m := cfg.Machine
	if m == nil {
		d := Detect()
		m = &d
	}
	c := &Copier{m: *m, p: NewPolicy(*m, cfg.NTFrom), workers: cfg.Workers, parMin: cfg.ParallelMin}
	if c.workers <= 0 {
		c.workers = runtime.GOMAXPROCS(0)
	}
	switch {
	case c.parMin == 0:
		c.parMin = 4 << 20
	case c.parMin < 0:
		c.workers = 1
	}
	return c
}

// Policy is the copier's kernel choice.
func (c *Copier) Policy() Policy {
	if c == nil {
		return Policy{}
	}
	return c.p
}

// Machine is what the policy was derived from.
func (c *Copier) Machine() Machine {
	if c == nil {
		return Machine{}
	}
	return c.m
}

// Workers is the most goroutines one copy is split over, and ParallelMin
// the size from which it is.
func (c *Copier) Workers() (n, from int) {
	if c == nil {
		return 1, 0
	}
	return c.workers, c.parMin
}

// Small reports whether Copy takes copy() for n bytes whatever the
// ranges (below the temporal kernel's and the split's thresholds), so that
// a caller copying n bytes again and again can call copy() itself.
func (c *Copier) Small(n int) bool {
	if c == nil {
		return true
	}
	return c.p.Kernel(n) == Go && (c.workers < 2 || n < c.parMin)
}

// Copy copies min(len(dst), len(src)) bytes of src to dst and returns
// that count, like copy(); overlapping ranges are copied as copy() does
// (memmove).
func (c *Copier) Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if c == nil || n == 0 {
		return copy(dst, src)
	}
	k := c.p.Kernel(n)
	if k == Go && (c.workers < 2 || n < c.parMin) {
		return copy(dst, src)
	}
	dst, src = dst[:n], src[:n]
	if overlaps(dst, src) {
		return copy(dst, src)
	}
	parts := c.parts(n)
	if parts < 2 {
		run(k, dst, src)
		return n
	}
	split(k, dst, src, parts, nil)
	return n
}

// parts is how many goroutines an n-byte copy is split over: 1 below
// ParallelMin, else Workers capped at GOMAXPROCS. GOMAXPROCS(0) takes the
// scheduler's global lock, so it is read only for a copy that may split,
// not on every put of a unix binding.
func (c *Copier) parts(n int) int {
	if c.workers < 2 || n < c.parMin {
		return 1
	}
	return min(c.workers, runtime.GOMAXPROCS(0))
}

// split copies dst, src in chunks taken in turn by the caller and by
// parts-1 helper goroutines: a helper that finds no idle core to run on
// takes no chunk, so the caller is never left waiting for a share of the
// copy nobody has started (at worst for the chunk a helper is copying),
// and a busy machine gets about one core's copy. The kernel is the whole
// copy's: its chunks together move as many bytes through the caches.
// Helpers are plain goroutines, not a pool's tasks: a pool task (the
// engine's host workers) waiting on other pool tasks could starve the pool.
// stop, if not nil, is called after each chunk: once it returns true no
// chunk starts. split returns the bytes copied (n unless stopped).
func split(k Kernel, dst, src []byte, parts int, stop func() bool) int {
	n := len(dst)
	chunk := chunkSize(n, parts)
	var next, copied atomic.Int64
	var stopped atomic.Bool
	work := func() {
		for !stopped.Load() {
			off := int(next.Add(int64(chunk))) - chunk
			if off >= n {
				return
			}
			end := min(off+chunk, n)
			run(k, dst[off:end], src[off:end])
			copied.Add(int64(end - off))
			if stop != nil && stop() {
				stopped.Store(true)
			}
		}
	}
	var wg sync.WaitGroup
	for range parts - 1 {
		wg.Add(1)
		go func() { defer wg.Done(); work() }()
	}
	work()
	wg.Wait()
	return int(copied.Load())
}

// chunkSize is the piece of an n-byte copy split over parts: eight per
// part, from 512 KiB to 4 MiB, whole pages.
func chunkSize(n, parts int) int { return min(max(n/(parts*8), 512<<10), 4<<20) &^ 4095 }

// overlaps reports whether two equally long non-empty slices share memory.
func overlaps(a, b []byte) bool {
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// String describes the machine and the choice, for logs and gxfer info.
func (c *Copier) String() string {
	if c == nil {
		return Go.String()
	}
	var feat []string
	for _, f := range []struct {
		on   bool
		name string
	}{{c.m.CPU.AVX2, "avx2"}, {c.m.CPU.ERMS, "erms"}, {c.m.CPU.FSRM, "fsrm"}} {
		if f.on {
			feat = append(feat, f.name)
		}
	}
	var cs []string
	for _, x := range c.m.Caches {
		cs = append(cs, fmt.Sprintf("L%d %s/%d", x.Level, FormatSize(x.Size), x.Sharers))
	}
	if len(cs) == 0 && c.m.CPU.L1D > 0 {
		cs = append(cs, fmt.Sprintf("L1d %s (cpuid)", FormatSize(c.m.CPU.L1D)))
	}
	return fmt.Sprintf("%s; %s family %#x [%s %s]; split over %d from %s", c.p, c.m.CPU.Vendor, c.m.CPU.Family, strings.Join(feat, " "), strings.Join(cs, " "), c.workers, FormatSize(c.parMin))
}
