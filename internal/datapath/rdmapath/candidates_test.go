package rdmapath

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRDMACandidatesOrder: the device tried first is the NIC closest to
// gaudi0 on the PCI tree, then the others (soft devices without a PCI
// parent last), unless Config.RDMA.Device(s) forces them; NICs tied for
// closest are all kept. A sysfs fixture, no device needed.
func TestRDMACandidatesOrder(t *testing.T) {
	root := t.TempDir()
	link := func(target, rel string) {
		require.NoError(t, os.MkdirAll(filepath.Join(root, path.Dir(rel)), 0o755))
		require.NoError(t, os.Symlink(target, filepath.Join(root, rel)))
	}
	pci := func(devPath string) {
		parts := strings.Split(devPath, "/")
		for i := 1; i < len(parts); i++ {
			rel := path.Join("sys/devices", path.Join(parts[:i+1]...))
			if _, err := os.Lstat(filepath.Join(root, rel)); err == nil {
				continue
			}
			require.NoError(t, os.MkdirAll(filepath.Join(root, rel), 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(root, rel, "numa_node"), []byte("0\n"), 0o644))
			link(path.Join("../../../devices", path.Join(parts[:i+1]...)), path.Join("sys/bus/pci/devices", parts[i]))
		}
	}
	nic := func(name, devPath string) {
		pci(devPath)
		ib := path.Join("sys/devices", devPath, "infiniband", name)
		require.NoError(t, os.MkdirAll(filepath.Join(root, ib), 0o755))
		link(path.Join("../../..", path.Base(devPath)), path.Join(ib, "device"))
		link(path.Join("../../devices", devPath, "infiniband", name), path.Join("sys/class/infiniband", name))
	}
	pci("pci0000:30/0000:30:01.0/0000:31:00.0/0000:32:00.0/0000:33:00.0") // the Gaudi, behind a switch
	nic("mlx5_0", "pci0000:80/0000:80:01.0/0000:81:00.0")                 // another root complex
	nic("mlx5_1", "pci0000:30/0000:30:01.0/0000:31:00.0/0000:32:01.0/0000:34:00.0")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "sys/devices/virtual/infiniband/rxe0"), 0o755))
	link("../../devices/virtual/infiniband/rxe0", "sys/class/infiniband/rxe0")

	cfg := Config{SysRoot: root, GaudiPCI: "0000:33:00.0"}
	for _, tc := range []struct {
		name   string
		setup  func()
		names  []string
		want   []string
		useNum int // how many of them to open
	}{
		{"closest first", nil, []string{"rxe0", "mlx5_0", "mlx5_1"}, []string{"mlx5_1", "mlx5_0", "rxe0"}, 1},
		// A device the sysfs tree does not show still comes, by name, last.
		{"unknown device last", nil, []string{"rxe0", "mlx5_0", "mlx5_1", "siw0"}, []string{"mlx5_1", "mlx5_0", "rxe0", "siw0"}, 1},
		// Two NICs tied for closest: both are used (transfers are sliced
		// over them).
		{"tied NICs", func() { nic("mlx5_2", "pci0000:30/0000:30:01.0/0000:31:00.0/0000:32:02.0/0000:35:00.0") },
			[]string{"rxe0", "mlx5_0", "mlx5_1", "mlx5_2"}, []string{"mlx5_1", "mlx5_2", "mlx5_0", "rxe0"}, 2},
		// Without a Gaudi PCI address (emulated devices): by name, one.
		{"no PCI address", func() { cfg.GaudiPCI = "" }, []string{"rxe0", "mlx5_0", "mlx5_1"}, []string{"mlx5_0", "mlx5_1", "rxe0"}, 1},
		{"Device", func() { cfg.Device = "rxe0" }, []string{"rxe0", "mlx5_0"}, []string{"rxe0"}, 1},
		{"Devices", func() { cfg.Device, cfg.Devices = "", []string{"rxe1", "rxe0"} }, []string{"rxe0", "rxe1"}, []string{"rxe1", "rxe0"}, 2},
	} {
		if tc.setup != nil {
			tc.setup()
		}
		got, n := candidates(cfg, tc.names)
		require.Equal(t, tc.want, got, tc.name)
		require.Equal(t, tc.useNum, n, tc.name)
	}
}
