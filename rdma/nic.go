package rdma

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// NIC is an RDMA device placed on the PCI tree relative to a Gaudi, as
// ranked by RankNICs.
type NIC struct {
	// Name is the RDMA device name (e.g. "mlx5_0", "rxe0").
	Name string
	// PCIAddr is the NIC's PCI address ("0000:34:00.0"), "" if the device
	// has no PCI parent (Soft-RoCE, siw and other soft devices).
	PCIAddr string
	// SysPath is the resolved sysfs path of the NIC's PCI device, relative
	// to the sysfs root given to RankNICs ("/sys/devices/pci0000:30/..."),
	// "" without a PCI parent.
	SysPath string
	// NUMANode is the NIC's NUMA node from sysfs, -1 if unknown.
	NUMANode int
	// Distance is the number of PCI tree hops between the NIC and the
	// Gaudi: the components of each resolved sysfs path below their
	// closest common ancestor, added (2 for two functions of one device,
	// 4 for two devices behind one switch, more through root ports and
	// host bridges). 0 is a NIC function of the Gaudi itself; -1 means no
	// PCI parent.
	Distance int
	// SameNUMA is true when both the NIC's and the Gaudi's NUMA node are
	// known and equal.
	SameNUMA bool
	// SharedBridge is true when the NIC and the Gaudi meet below the
	// sysfs root: behind one PCI bridge or under one host bridge. Without
	// one, hop counts only measure depth, and the NUMA node decides first.
	SharedBridge bool
	// Reason says, in words, why the NIC ranks where it does.
	Reason string
}

// OnPCI reports whether the NIC has a PCI parent (and so a Distance).
func (n NIC) OnPCI() bool { return n.Distance >= 0 }

// RankNICs ranks every RDMA device in sysRoot/sys/class/infiniband by
// closeness to the Gaudi at PCI address gaudiPCI ("0000:33:00.0", hex
// digits in either case), closest first, as Mooncake's topology discovery
// does: by PCI tree distance between the two devices' resolved sysfs paths
// (the Gaudi's /sys/bus/pci/devices/<addr>, the NIC's
// /sys/class/infiniband/<dev>/device), then devices on the Gaudi's NUMA
// node first, then by name. Devices without a PCI parent rank last, in
// name order, with the reason. sysRoot "" means "/" (tests pass a fixture
// tree).
//
// A malformed gaudiPCI, or one with no device under sysRoot, returns an
// error wrapping ErrInvalid; no RDMA device in sysfs returns one wrapping
// ErrNoDevice.
func RankNICs(sysRoot, gaudiPCI string) ([]NIC, error) {
	if sysRoot == "" {
		sysRoot = "/"
	}
	addr, err := ParsePCIAddr(gaudiPCI)
	if err != nil {
		return nil, err
	}
	root, err := filepath.Abs(sysRoot)
	if err != nil {
		return nil, fmt.Errorf("%w: sysfs root %q: %w", ErrInvalid, sysRoot, err)
	}
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r // so that resolved paths share the prefix
	}
	gpath, err := filepath.EvalSymlinks(filepath.Join(root, "sys/bus/pci/devices", addr))
	if err != nil {
		return nil, fmt.Errorf("%w: Gaudi PCI device %s: %w", ErrInvalid, addr, err)
	}
	gparts, ok := pciPath(root, gpath)
	if !ok {
		return nil, fmt.Errorf("%w: Gaudi PCI device %s resolves to %s, not a PCI device path", ErrInvalid, addr, gpath)
	}
	gnuma := readNUMA(gpath)

	class := filepath.Join(root, "sys/class/infiniband")
	ents, err := os.ReadDir(class)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("rdma: listing RDMA devices: %w", err)
	}
	if len(ents) == 0 {
		return nil, fmt.Errorf("%w: no RDMA device in %s", ErrNoDevice, class)
	}
	nics := make([]NIC, 0, len(ents))
	for _, e := range ents {
		nics = append(nics, placeNIC(root, filepath.Join(class, e.Name()), e.Name(), gparts, gnuma))
	}
	slices.SortFunc(nics, compareNICs)
	return nics, nil
}

// ClosestNICs is RankNICs cut to the closest NICs: the first one and every
// NIC tied with it (same distance and NUMA match, or all soft devices when
// there is no PCI NIC). Large transfers can be sliced over them with
// SplitTransfer.
func ClosestNICs(sysRoot, gaudiPCI string) ([]NIC, error) {
	ranked, err := RankNICs(sysRoot, gaudiPCI)
	if err != nil {
		return nil, err
	}
	return Closest(ranked), nil
}

// Closest returns the leading NICs of a RankNICs result that are equally
// close to the Gaudi (a prefix of ranked; nil for none).
func Closest(ranked []NIC) []NIC {
	if len(ranked) == 0 {
		return nil
	}
	n := 1
	for n < len(ranked) && compareCloseness(ranked[0], ranked[n]) == 0 {
		n++
	}
	return ranked[:n:n]
}

// compareCloseness orders NICs by closeness only: PCI before soft, shorter
// distance, same NUMA node first.
func compareCloseness(a, b NIC) int {
	if a.OnPCI() != b.OnPCI() {
		if a.OnPCI() {
			return -1
		}
		return 1
	}
	if a.SharedBridge != b.SharedBridge {
		if a.SharedBridge {
			return -1
		}
		return 1
	}
	numa := 0
	if a.SameNUMA != b.SameNUMA {
		numa = 1
		if a.SameNUMA {
			numa = -1
		}
	}
	if !a.SharedBridge && numa != 0 {
		return numa // across host bridges the socket matters before depth
	}
	if c := cmp.Compare(a.Distance, b.Distance); c != 0 {
		return c
	}
	return numa
}

func compareNICs(a, b NIC) int {
	if c := compareCloseness(a, b); c != 0 {
		return c
	}
	return strings.Compare(a.Name, b.Name)
}

// placeNIC locates one RDMA device (its class entry at dir) relative to the
// Gaudi's path components gparts.
func placeNIC(root, dir, name string, gparts []string, gnuma int) NIC {
	n := NIC{Name: name, NUMANode: -1, Distance: -1}
	dpath, err := filepath.EvalSymlinks(filepath.Join(dir, "device"))
	if err != nil {
		n.Reason = "no PCI parent (soft device such as rxe or siw): no device link in sysfs"
		return n
	}
	parts, ok := pciPath(root, dpath)
	if !ok {
		n.Reason = "no PCI parent: its device is " + sysRel(root, dpath) + ", not a PCI device"
		return n
	}
	n.PCIAddr = parts[len(parts)-1]
	n.SysPath = "/" + strings.Join(parts, "/")
	n.NUMANode = readNUMA(dpath)
	n.SameNUMA = n.NUMANode >= 0 && n.NUMANode == gnuma

	common := 0
	for common < len(parts) && common < len(gparts) && parts[common] == gparts[common] {
		common++
	}
	n.Distance = len(parts) - common + len(gparts) - common

	var where string
	switch {
	case n.Distance == 0:
		n.SharedBridge = true
		where = "a function of the Gaudi itself"
	case common == len(gparts) || common == len(parts):
		n.SharedBridge = true
		where = "on the Gaudi's own PCI path"
	default:
		switch anc := parts[common-1]; {
		case isPCIAddr(anc):
			n.SharedBridge = true
			where = "behind the same PCI bridge " + anc + " as the Gaudi"
		case strings.HasPrefix(anc, "pci"):
			n.SharedBridge = true
			where = "under the same host bridge " + anc + " as the Gaudi, on another root port"
		default:
			where = "under another host bridge than the Gaudi"
		}
	}
	var numa string
	switch {
	case n.NUMANode < 0:
		numa = "NUMA node unknown"
	case gnuma < 0:
		numa = fmt.Sprintf("NUMA node %d, the Gaudi's unknown", n.NUMANode)
	case n.SameNUMA:
		numa = fmt.Sprintf("same NUMA node %d", n.NUMANode)
	default:
		numa = fmt.Sprintf("NUMA node %d, the Gaudi is on %d", n.NUMANode, gnuma)
	}
	n.Reason = fmt.Sprintf("%d PCI hops, %s; %s", n.Distance, where, numa)
	return n
}

// pciPath splits a resolved sysfs path into components relative to root
// and reports whether it is a PCI device: under sys/devices/pci<domain:bus>
// and named by a PCI address.
func pciPath(root, p string) ([]string, bool) {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return nil, false
	}
	parts := strings.Split(filepath.ToSlash(rel), "/")
	if len(parts) < 4 || parts[0] != "sys" || parts[1] != "devices" || !strings.HasPrefix(parts[2], "pci") || !isPCIAddr(parts[len(parts)-1]) {
		return nil, false
	}
	return parts, true
}

func sysRel(root, p string) string {
	if rel, err := filepath.Rel(root, p); err == nil && !strings.HasPrefix(rel, "..") {
		return "/" + filepath.ToSlash(rel)
	}
	return p
}

// readNUMA reads a PCI device's numa_node (-1 when absent or unknown).
func readNUMA(dev string) int {
	b, err := os.ReadFile(filepath.Join(dev, "numa_node"))
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// ParsePCIAddr validates a PCI address in the kernel's sysfs form,
// domain:bus:device.function ("0000:33:00.0"; the domain may have more
// than 4 hex digits, as VMD domains do), and returns it in lower case.
// Anything else returns an error wrapping ErrInvalid.
func ParsePCIAddr(s string) (string, error) {
	l := strings.ToLower(s)
	if !isPCIAddr(l) {
		return "", fmt.Errorf("%w: PCI address %q (want domain:bus:device.function, e.g. 0000:33:00.0)", ErrInvalid, s)
	}
	return l, nil
}

// isPCIAddr reports whether s is a lower-case dddd:bb:dd.f PCI address.
func isPCIAddr(s string) bool {
	dom, rest, ok := strings.Cut(s, ":")
	if !ok || len(dom) < 4 || len(dom) > 8 || !isHex(dom) {
		return false
	}
	bus, rest, ok := strings.Cut(rest, ":")
	if !ok || len(bus) != 2 || !isHex(bus) {
		return false
	}
	dev, fn, ok := strings.Cut(rest, ".")
	if !ok || len(dev) != 2 || !isHex(dev) || dev[0] > '1' || len(fn) != 1 || fn[0] < '0' || fn[0] > '7' {
		return false
	}
	return true
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// Slice is one piece of a transfer split over several NICs: Len bytes at
// Off from the transfer's start, to be carried by NIC index NIC (an index
// into the NICs the transfer was split over).
type Slice struct {
	NIC      int
	Off, Len uint64
}

// SplitTransfer splits a transfer of n bytes into at most nics slices, one
// per NIC, in order and contiguous: every byte is covered exactly once, no
// slice is empty, every slice starts at a multiple of align bytes from the
// transfer's start (and all but the last end at one), and slice lengths
// differ by at most align (the longer ones last). Fewer than nics slices come
// back when n has fewer than nics align-sized units. n == 0, nics < 1 or
// align == 0 return an error wrapping ErrInvalid.
//
// The caller picks align (e.g. 4 KiB, or the MTU) and caps nics so that
// slices are worth their work request (Mooncake slices at 64 KiB).
func SplitTransfer(n uint64, nics int, align uint64) ([]Slice, error) {
	return AppendSplit(nil, n, nics, align)
}

// AppendSplit is SplitTransfer appending to dst (no allocation when dst has
// room for nics slices).
func AppendSplit(dst []Slice, n uint64, nics int, align uint64) ([]Slice, error) {
	if n == 0 || nics < 1 || align == 0 {
		return dst, fmt.Errorf("%w: split of %d bytes over %d NICs aligned to %d", ErrInvalid, n, nics, align)
	}
	units := n / align
	if n%align != 0 {
		units++
	}
	k := uint64(nics)
	if k > units {
		k = units
	}
	per, extra := units/k, units%k
	var unit uint64 // first unit of the next slice
	for i := uint64(0); i < k; i++ {
		cnt := per
		if i >= k-extra {
			cnt++ // the last slices: the very last one may be short
		}
		// (unit)*align < n for every unit < units, so only the end of
		// the last slice can overflow: it is n.
		off, end := unit*align, n
		if unit+cnt < units {
			end = (unit + cnt) * align
		}
		dst = append(dst, Slice{NIC: int(i), Off: off, Len: end - off})
		unit += cnt
	}
	return dst, nil
}
