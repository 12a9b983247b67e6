package dma

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// habanalabsDriver is the kernel driver name behind Gaudi device nodes.
const habanalabsDriver = "habanalabs"

// NodeInfo describes one Gaudi compute node found by Discover.
type NodeInfo struct {
	Index       int       // N in accelN / hlN
	Path        string    // compute node, e.g. /dev/accel/accel0 or /dev/hl0
	ControlPath string    // control node (INFO only) if present, else ""
	Numbering   Numbering // ioctl numbering the node takes
	PCIAddr     string    // sysfs pci_addr, "" if unreadable
	DeviceType  string    // sysfs device_type, e.g. "GAUDI2", "" if unreadable
	Driver      string    // kernel driver name ("habanalabs")
	Emulated    bool      // always false for Discover; set for emulated nodes
}

// Discover lists the Gaudi compute nodes under root ("" means "/").
//
// On kernels >= 6.7 (where habanalabs registers as a DRM accel device and
// takes DRM ioctl numbers) the nodes are /dev/accel/accelN. The accel
// index space is shared with other accel drivers (ivpu, qaic, ...), so a
// node is kept only if /sys/class/accel/accelN/device/driver links to a
// driver named "habanalabs". pci_addr and device_type are read from
// /sys/class/accel/accelN/. If no habanalabs accel node exists, the legacy
// /dev/hlN nodes of older kernels (up to 6.6) are listed, with attributes from
// /sys/class/habanalabs/hlN/. Control nodes (accel_controlDN, hl_controlDN)
// are reported in ControlPath, never as compute nodes.
//
// Missing directories give an empty list and no error; missing attributes
// give empty fields. The result is sorted by index.
func Discover(root string) ([]NodeInfo, error) {
	if root == "" {
		root = "/"
	}
	nodes, err := discoverAccel(root)
	if err != nil {
		return nil, err
	}
	if len(nodes) == 0 {
		if nodes, err = discoverLegacy(root); err != nil {
			return nil, err
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Index < nodes[j].Index })
	return nodes, nil
}

func discoverAccel(root string) ([]NodeInfo, error) {
	devDir := filepath.Join(root, "dev", "accel")
	idx, err := listIndexed(devDir, "accel")
	if err != nil {
		return nil, err
	}
	var nodes []NodeInfo
	for _, n := range idx {
		name := "accel" + strconv.Itoa(n)
		sys := filepath.Join(root, "sys", "class", "accel", name)
		drv := driverName(filepath.Join(sys, "device", "driver"))
		if drv != habanalabsDriver {
			continue
		}
		nodes = append(nodes, NodeInfo{
			Index:       n,
			Path:        filepath.Join(devDir, name),
			ControlPath: existing(filepath.Join(devDir, "accel_controlD"+strconv.Itoa(n))),
			Numbering:   NumberingAccel,
			PCIAddr:     readAttr(filepath.Join(sys, "pci_addr")),
			DeviceType:  readAttr(filepath.Join(sys, "device_type")),
			Driver:      drv,
		})
	}
	return nodes, nil
}

func discoverLegacy(root string) ([]NodeInfo, error) {
	devDir := filepath.Join(root, "dev")
	idx, err := listIndexed(devDir, "hl")
	if err != nil {
		return nil, err
	}
	var nodes []NodeInfo
	for _, n := range idx {
		name := "hl" + strconv.Itoa(n)
		sys := filepath.Join(root, "sys", "class", "habanalabs", name)
		// The habanalabs class belongs to the driver; read the driver link
		// anyway when it is there.
		drv := driverName(filepath.Join(sys, "device", "driver"))
		if drv == "" {
			drv = habanalabsDriver
		} else if drv != habanalabsDriver {
			continue
		}
		nodes = append(nodes, NodeInfo{
			Index:       n,
			Path:        filepath.Join(devDir, name),
			ControlPath: existing(filepath.Join(devDir, "hl_controlD"+strconv.Itoa(n))),
			Numbering:   NumberingLegacy,
			PCIAddr:     readAttr(filepath.Join(sys, "pci_addr")),
			DeviceType:  readAttr(filepath.Join(sys, "device_type")),
			Driver:      drv,
		})
	}
	return nodes, nil
}

// listIndexed returns N for every entry of dir named exactly prefix+N
// (decimal). A missing dir is not an error.
func listIndexed(dir, prefix string) ([]int, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, newErr("discover: list "+dir, nil, "", err)
	}
	var out []int
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok || rest == "" || strings.TrimLeft(rest, "0123456789") != "" {
			continue
		}
		if len(rest) > 1 && rest[0] == '0' {
			continue // not a kernel-generated name
		}
		n, err := strconv.Atoi(rest)
		if err != nil {
			continue
		}
		out = append(out, n)
	}
	return out, nil
}

// driverName returns the base name of the driver symlink's target, or "".
// The target may dangle (fixtures, unbound paths); only the link is read.
func driverName(link string) string {
	t, err := os.Readlink(link)
	if err != nil {
		return ""
	}
	return filepath.Base(t)
}

func readAttr(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func existing(path string) string {
	if _, err := os.Lstat(path); err != nil {
		return ""
	}
	return path
}
