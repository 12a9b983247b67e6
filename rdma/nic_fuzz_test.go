package rdma

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzPCIPath: RankNICs reads where sysfs links resolve (pciPath) and
// numa_node files (readNUMA). pciPath accepts only a path below root of
// the form sys/devices/pci<...>/.../<PCI address>, and its components
// join back to that path; readNUMA is the file's decimal node, -1 for
// anything else (absent, negative, not a number).
func FuzzPCIPath(f *testing.F) {
	for _, s := range [][2]string{
		{"sys/devices/pci0000:30/0000:30:01.0/0000:33:00.0", "0\n"},
		{"sys/devices/pci0000:30/0000:30:01.0/0000:31:00.0/0000:32:00.0/0000:33:00.0", "1\n"},
		{"sys/devices/virtual/infiniband/rxe0", "-1\n"},
		{"sys/devices/pci0000:30/0000:30:01.0/../0000:33:00.0", ""},
		{"../sys/devices/pci0000:30/0000:30:01.0/0000:33:00.0", "x"},
		{"sys/devices/pci0000:30/0000:30:01.0/0000:33:00.0/infiniband/mlx5_0", "+3"},
	} {
		f.Add(s[0], s[1])
	}
	root := f.TempDir()
	numa := filepath.Join(root, "numa_node")
	f.Fuzz(func(t *testing.T, rel, node string) {
		p := filepath.Join(root, rel)
		if parts, ok := pciPath(root, p); ok {
			if len(parts) < 4 || parts[0] != "sys" || parts[1] != "devices" || !strings.HasPrefix(parts[2], "pci") {
				t.Fatalf("pciPath(%q) = %q: not under sys/devices/pci*", rel, parts)
			}
			if a, err := ParsePCIAddr(parts[len(parts)-1]); err != nil || a != parts[len(parts)-1] {
				t.Fatalf("pciPath(%q) = %q: ends in no PCI address", rel, parts)
			}
			for _, c := range parts {
				if c == "" || c == "." || c == ".." {
					t.Fatalf("pciPath(%q) = %q: component %q", rel, parts, c)
				}
			}
			if back := filepath.Join(append([]string{root}, parts...)...); back != p {
				t.Fatalf("pciPath(%q) = %q, joins to %q, not %q", rel, parts, back, p)
			}
		}

		if err := os.WriteFile(numa, []byte(node), 0o644); err != nil {
			t.Fatal(err)
		}
		want := -1
		if n, err := strconv.Atoi(strings.TrimSpace(node)); err == nil && n >= 0 {
			want = n
		}
		if got := readNUMA(root); got != want {
			t.Fatalf("readNUMA(%q) = %d, want %d", node, got, want)
		}
	})
}
