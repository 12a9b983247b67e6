package dma

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// fixture builds a fake /dev + /sys tree under a temp dir.
type fixture struct {
	t    *testing.T
	root string
}

func newFixture(t *testing.T) *fixture { return &fixture{t: t, root: t.TempDir()} }

func (f *fixture) file(rel, content string) {
	p := filepath.Join(f.root, rel)
	require.NoError(f.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(f.t, os.WriteFile(p, []byte(content), 0o644))
}

func (f *fixture) link(rel, target string) {
	p := filepath.Join(f.root, rel)
	require.NoError(f.t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(f.t, os.Symlink(target, p))
}

func (f *fixture) path(rel string) string { return filepath.Join(f.root, rel) }

// accel adds /dev/accel/accelN bound to driver (pci_addr/device_type when
// non-empty).
func (f *fixture) accel(n, driver, pci, typ string) {
	f.file("dev/accel/accel"+n, "")
	sys := "sys/class/accel/accel" + n
	if driver != "" {
		f.link(sys+"/device/driver", "../../../../bus/pci/drivers/"+driver)
	}
	if pci != "" {
		f.file(sys+"/pci_addr", pci+"\n")
	}
	if typ != "" {
		f.file(sys+"/device_type", typ+"\n")
	}
}

func TestDiscoverAccel(t *testing.T) {
	f := newFixture(t)
	f.accel("0", "habanalabs", "0000:19:00.0", "GAUDI2")
	f.accel("1", "ivpu", "0000:00:0b.0", "") // another accel driver
	f.accel("10", "habanalabs", "0000:b3:00.0", "GAUDI2B")
	f.accel("2", "habanalabs", "", "")         // attributes missing
	f.accel("3", "", "0000:1a:00.0", "GAUDI2") // no driver bound
	f.file("dev/accel/accel_controlD0", "")    // control nodes are never compute nodes
	f.file("dev/accel/accel_controlD10", "")
	f.file("dev/accel/accelx", "")
	f.file("dev/hl5", "") // legacy nodes are ignored when accel ones exist

	nodes, err := Discover(f.root)
	require.NoError(t, err)
	require.Equal(t, []NodeInfo{
		{Index: 0, Path: f.path("dev/accel/accel0"), ControlPath: f.path("dev/accel/accel_controlD0"),
			Numbering: NumberingAccel, PCIAddr: "0000:19:00.0", DeviceType: "GAUDI2", Driver: "habanalabs"},
		{Index: 2, Path: f.path("dev/accel/accel2"), Numbering: NumberingAccel, Driver: "habanalabs"},
		{Index: 10, Path: f.path("dev/accel/accel10"), ControlPath: f.path("dev/accel/accel_controlD10"),
			Numbering: NumberingAccel, PCIAddr: "0000:b3:00.0", DeviceType: "GAUDI2B", Driver: "habanalabs"},
	}, nodes)
}

func TestDiscoverLegacy(t *testing.T) {
	f := newFixture(t)
	for _, n := range []string{"1", "0"} {
		f.file("dev/hl"+n, "")
		f.file("dev/hl_controlD"+n, "")
	}
	f.file("sys/class/habanalabs/hl0/pci_addr", "0000:19:00.0\n")
	f.file("sys/class/habanalabs/hl0/device_type", "GAUDI\n")
	f.file("dev/hl", "")
	f.file("dev/hlfoo", "")
	f.file("dev/hl01", "")
	f.file("dev/accel/accel0", "") // accel dir with no habanalabs node: fall back
	f.link("sys/class/accel/accel0/device/driver", "../../../../bus/pci/drivers/qaic")

	nodes, err := Discover(f.root)
	require.NoError(t, err)
	require.Equal(t, []NodeInfo{
		{Index: 0, Path: f.path("dev/hl0"), ControlPath: f.path("dev/hl_controlD0"), Numbering: NumberingLegacy,
			PCIAddr: "0000:19:00.0", DeviceType: "GAUDI", Driver: "habanalabs"},
		{Index: 1, Path: f.path("dev/hl1"), ControlPath: f.path("dev/hl_controlD1"), Numbering: NumberingLegacy,
			Driver: "habanalabs"},
	}, nodes)
}

func TestDiscoverEmpty(t *testing.T) {
	nodes, err := Discover(t.TempDir())
	require.NoError(t, err)
	require.Empty(t, nodes)

	f := newFixture(t)
	f.file("dev/null", "")
	f.file("dev/hl_controlD0", "") // a control node alone is not a device
	nodes, err = Discover(f.root)
	require.NoError(t, err)
	require.Empty(t, nodes)
}

func TestDiscoverRealRoot(t *testing.T) {
	// Whatever this machine has, Discover("") must not fail.
	_, err := Discover("")
	require.NoError(t, err)
}
