package rdma_test

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/rdma"
)

// sysfs builds a fixture sysfs tree the way the kernel lays it out:
//
//	sys/devices/pci0000:30/0000:30:01.0/.../0000:33:00.0/    PCI devices, each with numa_node
//	sys/bus/pci/devices/0000:33:00.0 -> ../../../devices/pci0000:30/.../0000:33:00.0
//	sys/devices/.../0000:34:00.0/infiniband/mlx5_0/device -> ../../../0000:34:00.0
//	sys/class/infiniband/mlx5_0 -> ../../devices/.../0000:34:00.0/infiniband/mlx5_0
//	sys/class/infiniband/rxe0 -> ../../devices/virtual/infiniband/rxe0   (no device link)
//
// All links are relative, as in the kernel's sysfs, so the tree resolves
// inside its temporary root.
type sysfs struct {
	t    *testing.T
	root string
}

func newSysfs(t *testing.T) *sysfs {
	t.Helper()
	return &sysfs{t: t, root: t.TempDir()}
}

func (s *sysfs) mkdir(rel string) string {
	s.t.Helper()
	p := filepath.Join(s.root, rel)
	require.NoError(s.t, os.MkdirAll(p, 0o755))
	return p
}

func (s *sysfs) symlink(target, rel string) {
	s.t.Helper()
	s.mkdir(path.Dir(rel))
	require.NoError(s.t, os.Symlink(target, filepath.Join(s.root, rel)))
}

// pci adds a PCI device at devPath (below sys/devices, e.g.
// "pci0000:30/0000:30:01.0/0000:33:00.0") with every bridge on the way.
// numa is written to each new device's numa_node ("" leaves it out, as
// on kernels without NUMA support, "-1" is the kernel's "no node").
func (s *sysfs) pci(devPath, numa string) {
	s.t.Helper()
	parts := strings.Split(devPath, "/")
	for i := 1; i < len(parts); i++ { // parts[0] is the host bridge pciDDDD:BB
		rel := path.Join("sys/devices", path.Join(parts[:i+1]...))
		if _, err := os.Lstat(filepath.Join(s.root, rel)); err == nil {
			continue
		}
		dir := s.mkdir(rel)
		if numa != "" {
			require.NoError(s.t, os.WriteFile(filepath.Join(dir, "numa_node"), []byte(numa+"\n"), 0o644))
		}
		// sys/bus/pci/devices/<addr> -> ../../../devices/<path>
		s.symlink(path.Join("../../../devices", path.Join(parts[:i+1]...)), path.Join("sys/bus/pci/devices", parts[i]))
	}
}

// nic adds RDMA device name on the PCI device at devPath (added first).
func (s *sysfs) nic(name, devPath, numa string) {
	s.t.Helper()
	s.pci(devPath, numa)
	ib := path.Join("sys/devices", devPath, "infiniband", name)
	s.mkdir(ib)
	s.symlink(path.Join("../../..", path.Base(devPath)), path.Join(ib, "device"))
	s.symlink(path.Join("../../devices", devPath, "infiniband", name), path.Join("sys/class/infiniband", name))
}

// soft adds a soft RDMA device (rxe, siw): no PCI parent, no device link.
func (s *sysfs) soft(name string) {
	s.t.Helper()
	s.mkdir(path.Join("sys/devices/virtual/infiniband", name))
	s.symlink(path.Join("../../devices/virtual/infiniband", name), path.Join("sys/class/infiniband", name))
}

// Paths used by the fixtures. The Gaudi sits behind a PCIe switch
// (upstream port 31:00.0, downstream ports 32:0x.0) on root port 30:01.0
// of host bridge pci0000:30 (NUMA node 0); pci0000:50 is another host
// bridge on node 0, pci0000:b0 one on node 1.
const (
	gaudiAddr   = "0000:33:00.0"
	sw          = "pci0000:30/0000:30:01.0/0000:31:00.0"
	gaudiPath   = sw + "/0000:32:00.0/" + gaudiAddr
	sameSwitch  = sw + "/0000:32:01.0/0000:34:00.0"
	sameSwitch2 = sw + "/0000:32:02.0/0000:35:00.0"
	otherPort   = "pci0000:30/0000:30:02.0/0000:40:00.0"
	otherHB0    = "pci0000:50/0000:50:01.0/0000:51:00.0"
	otherHB1    = "pci0000:b0/0000:b0:01.0/0000:b1:00.0"
)

func TestRankNICs(t *testing.T) {
	type want struct {
		name     string
		dist     int
		numa     int
		sameNUMA bool
		reason   string // substring
	}
	for _, tc := range []struct {
		name      string
		gaudiNUMA string
		build     func(s *sysfs)
		ranked    []want
		closest   []string
	}{{
		name:      "NIC under the same switch as the Gaudi",
		gaudiNUMA: "0",
		build: func(s *sysfs) {
			s.nic("mlx5_2", otherPort, "0")
			s.nic("mlx5_0", sameSwitch, "0")
			s.nic("mlx5_9", otherHB1, "1")
		},
		ranked: []want{
			{"mlx5_0", 4, 0, true, "4 PCI hops, behind the same PCI bridge 0000:31:00.0 as the Gaudi; same NUMA node 0"},
			{"mlx5_2", 6, 0, true, "under the same host bridge pci0000:30 as the Gaudi, on another root port"},
			{"mlx5_9", 8, 1, false, "under another host bridge than the Gaudi; NUMA node 1, the Gaudi is on 0"},
		},
		closest: []string{"mlx5_0"},
	}, {
		name:      "NIC on another root port, same NUMA node",
		gaudiNUMA: "0",
		build: func(s *sysfs) {
			s.nic("mlx5_1", otherHB0, "0")
			s.nic("mlx5_0", otherPort, "0")
		},
		ranked: []want{
			{"mlx5_0", 6, 0, true, "on another root port"},
			{"mlx5_1", 8, 0, true, "another host bridge"},
		},
		closest: []string{"mlx5_0"},
	}, {
		// Equally far on the PCI tree (two host bridges): the NUMA node
		// decides, whatever the names say.
		name:      "other NUMA node ranks after the same one at equal distance",
		gaudiNUMA: "0",
		build: func(s *sysfs) {
			s.nic("a_far", otherHB1, "1")
			s.nic("z_near", otherHB0, "0")
		},
		ranked: []want{
			{"z_near", 8, 0, true, "same NUMA node 0"},
			{"a_far", 8, 1, false, "NUMA node 1, the Gaudi is on 0"},
		},
		closest: []string{"z_near"},
	}, {
		// Across host bridges hop counts only measure depth: a shallow NIC
		// on the other socket must not beat a deeper one on the Gaudi's.
		name:      "without a shared bridge the NUMA node decides before depth",
		gaudiNUMA: "0",
		build: func(s *sysfs) {
			s.nic("mlx5_far", "pci0000:b0/0000:b0:01.0", "1")
			s.nic("mlx5_near", otherHB0+"/0000:52:00.0", "0")
		},
		ranked: []want{
			{"mlx5_near", 9, 0, true, "another host bridge"},
			{"mlx5_far", 7, 1, false, "NUMA node 1, the Gaudi is on 0"},
		},
		closest: []string{"mlx5_near"},
	}, {
		name:      "several equally close NICs are ties",
		gaudiNUMA: "0",
		build: func(s *sysfs) {
			s.nic("mlx5_3", sameSwitch2, "0")
			s.nic("mlx5_0", sameSwitch, "0")
			s.nic("mlx5_1", sameSwitch[:len(sameSwitch)-1]+"1", "0") // second function of the same card
			s.nic("mlx5_4", otherPort, "0")
		},
		ranked: []want{
			{"mlx5_0", 4, 0, true, "same PCI bridge 0000:31:00.0"},
			{"mlx5_1", 4, 0, true, "same PCI bridge 0000:31:00.0"},
			{"mlx5_3", 4, 0, true, "same PCI bridge 0000:31:00.0"},
			{"mlx5_4", 6, 0, true, "another root port"},
		},
		closest: []string{"mlx5_0", "mlx5_1", "mlx5_3"},
	}, {
		name:      "soft NIC only",
		gaudiNUMA: "0",
		build:     func(s *sysfs) { s.soft("rxe0") },
		ranked:    []want{{"rxe0", -1, -1, false, "no PCI parent"}},
		closest:   []string{"rxe0"},
	}, {
		name:      "soft NICs rank after every PCI NIC",
		gaudiNUMA: "0",
		build: func(s *sysfs) {
			s.soft("rxe0")
			s.soft("siw0")
			s.nic("mlx5_0", otherHB1, "1")
		},
		ranked: []want{
			{"mlx5_0", 8, 1, false, "another host bridge"},
			{"rxe0", -1, -1, false, "no PCI parent"},
			{"siw0", -1, -1, false, "no PCI parent"},
		},
		closest: []string{"mlx5_0"},
	}, {
		name:      "Gaudi numa_node -1: nothing is on its node",
		gaudiNUMA: "-1",
		build: func(s *sysfs) {
			s.nic("mlx5_1", otherHB0, "0")
			s.nic("mlx5_0", otherHB1, "-1")
		},
		ranked: []want{
			{"mlx5_0", 8, -1, false, "NUMA node unknown"},
			{"mlx5_1", 8, 0, false, "NUMA node 0, the Gaudi's unknown"},
		},
		closest: []string{"mlx5_0", "mlx5_1"},
	}, {
		name:      "NIC without numa_node ranks after a same-node NIC",
		gaudiNUMA: "1",
		build: func(s *sysfs) {
			s.nic("mlx5_0", otherHB0, "") // no numa_node file at all
			s.nic("mlx5_1", otherPort, "1")
		},
		ranked: []want{
			{"mlx5_1", 6, 1, true, "same NUMA node 1"},
			{"mlx5_0", 8, -1, false, "NUMA node unknown"},
		},
		closest: []string{"mlx5_1"},
	}, {
		name:      "a NIC function of the Gaudi itself is closest",
		gaudiNUMA: "0",
		build: func(s *sysfs) {
			s.nic("hbl_0", gaudiPath, "0")
			s.nic("mlx5_0", sameSwitch, "0")
		},
		ranked: []want{
			{"hbl_0", 0, 0, true, "a function of the Gaudi itself"},
			{"mlx5_0", 4, 0, true, "same PCI bridge"},
		},
		closest: []string{"hbl_0"},
	}, {
		name:      "a device whose parent is not on the PCI bus",
		gaudiNUMA: "0",
		build: func(s *sysfs) {
			s.mkdir("sys/devices/platform/soc.0/infiniband/plat0")
			s.symlink("../../../soc.0", "sys/devices/platform/soc.0/infiniband/plat0/device")
			s.symlink("../../devices/platform/soc.0/infiniband/plat0", "sys/class/infiniband/plat0")
			s.nic("mlx5_0", otherPort, "0")
		},
		ranked: []want{
			{"mlx5_0", 6, 0, true, "another root port"},
			{"plat0", -1, -1, false, "no PCI parent: its device is /sys/devices/platform/soc.0"},
		},
		closest: []string{"mlx5_0"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSysfs(t)
			s.pci(gaudiPath, tc.gaudiNUMA)
			tc.build(s)

			ranked, err := rdma.RankNICs(s.root, gaudiAddr)
			require.NoError(t, err)
			got := make([]want, len(ranked))
			for i, n := range ranked {
				got[i] = want{n.Name, n.Distance, n.NUMANode, n.SameNUMA, ""}
				assert.Equal(t, n.Distance >= 0, n.OnPCI(), n.Name)
				if n.OnPCI() {
					assert.True(t, strings.HasPrefix(n.SysPath, "/sys/devices/pci"), n.SysPath)
					assert.Equal(t, path.Base(n.SysPath), n.PCIAddr)
				} else {
					assert.Empty(t, n.PCIAddr)
					assert.Empty(t, n.SysPath)
				}
			}
			wantNoReason := make([]want, len(tc.ranked))
			for i, w := range tc.ranked {
				wantNoReason[i] = w
				wantNoReason[i].reason = ""
			}
			require.Equal(t, wantNoReason, got)
			for i, w := range tc.ranked {
				assert.Contains(t, ranked[i].Reason, w.reason, w.name)
			}

			closest, err := rdma.ClosestNICs(s.root, strings.ToUpper(gaudiAddr))
			require.NoError(t, err)
			var names []string
			for _, n := range closest {
				names = append(names, n.Name)
			}
			assert.Equal(t, tc.closest, names)
			assert.Equal(t, closest, rdma.Closest(ranked))
		})
	}
}

func TestRankNICsErrors(t *testing.T) {
	s := newSysfs(t)
	s.pci(gaudiPath, "0")
	s.nic("mlx5_0", sameSwitch, "0")
	empty := newSysfs(t)
	empty.pci(gaudiPath, "0")
	emptyClass := newSysfs(t)
	emptyClass.pci(gaudiPath, "0")
	emptyClass.mkdir("sys/class/infiniband")

	for _, tc := range []struct {
		name, root, addr string
		is               []error
	}{
		{"empty address", s.root, "", []error{rdma.ErrInvalid}},
		{"no domain", s.root, "33:00.0", []error{rdma.ErrInvalid}},
		{"no function", s.root, "0000:33:00", []error{rdma.ErrInvalid}},
		{"device number above 0x1f", s.root, "0000:33:20.0", []error{rdma.ErrInvalid}},
		{"function above 7", s.root, "0000:33:00.8", []error{rdma.ErrInvalid}},
		{"not hex", s.root, "000g:33:00.0", []error{rdma.ErrInvalid}},
		{"path, not an address", s.root, "../0000:33:00.0", []error{rdma.ErrInvalid}},
		{"no such PCI device", s.root, "0000:99:00.0", []error{rdma.ErrInvalid, fs.ErrNotExist}},
		{"no infiniband class", empty.root, gaudiAddr, []error{rdma.ErrNoDevice, rdma.ErrUnavailable}},
		{"empty infiniband class", emptyClass.root, gaudiAddr, []error{rdma.ErrNoDevice}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rdma.RankNICs(tc.root, tc.addr)
			require.Error(t, err)
			assert.Nil(t, got)
			for _, target := range tc.is {
				assert.ErrorIs(t, err, target)
			}
			_, err = rdma.ClosestNICs(tc.root, tc.addr)
			assert.ErrorIs(t, err, tc.is[0])
		})
	}
}

func TestParsePCIAddr(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"0000:33:00.0", "0000:33:00.0"},
		{"0000:B3:1F.7", "0000:b3:1f.7"},
		{"10000:e1:00.0", "10000:e1:00.0"}, // VMD domain
	} {
		got, err := rdma.ParsePCIAddr(tc.in)
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got)
	}
	for _, in := range []string{"", "0000:33:00.0 ", "0000:333:00.0", "000:33:00.0", "0000:33:0.0", "0000-33-00.0", "0000:33:00.00"} {
		_, err := rdma.ParsePCIAddr(in)
		assert.ErrorIs(t, err, rdma.ErrInvalid, "%q", in)
	}
}

func TestClosestEmpty(t *testing.T) {
	assert.Nil(t, rdma.Closest(nil))
}

// TestRankNICsRealSysfs ranks this machine's RDMA devices against one of
// its PCI devices standing in for the Gaudi. In the Soft-RoCE VM, rxe0
// must come out as a soft device (no PCI parent) on the kernel's real
// sysfs layout.
func TestRankNICsRealSysfs(t *testing.T) {
	needDevice(t)
	names, err := rdma.DeviceNames()
	require.NoError(t, err)
	pcis, err := os.ReadDir("/sys/bus/pci/devices")
	if err != nil || len(pcis) == 0 {
		t.Skipf("no PCI device in /sys/bus/pci/devices to stand in for a Gaudi (%v)", err)
	}
	ranked, err := rdma.RankNICs("", pcis[0].Name())
	require.NoError(t, err)
	var got []string
	for _, n := range ranked {
		got = append(got, n.Name)
		t.Logf("%s: pci %q distance %d numa %d: %s", n.Name, n.PCIAddr, n.Distance, n.NUMANode, n.Reason)
		if strings.HasPrefix(n.Name, "rxe") || strings.HasPrefix(n.Name, "siw") {
			assert.False(t, n.OnPCI(), n.Name)
			assert.Contains(t, n.Reason, "no PCI parent")
		}
	}
	assert.Subset(t, got, names, "every libibverbs device is ranked")
	assert.NotEmpty(t, rdma.Closest(ranked))
}

func TestSplitTransfer(t *testing.T) {
	const K = 4096
	for _, tc := range []struct {
		name  string
		n     uint64
		nics  int
		align uint64
		want  []rdma.Slice
	}{
		{"one NIC takes everything", 10*K + 5, 1, K, []rdma.Slice{{0, 0, 10*K + 5}}},
		{"even split", 8 * K, 2, K, []rdma.Slice{{0, 0, 4 * K}, {1, 4 * K, 4 * K}}},
		{"extra units go to the last slices", 10 * K, 4, K, []rdma.Slice{{0, 0, 2 * K}, {1, 2 * K, 2 * K}, {2, 4 * K, 3 * K}, {3, 7 * K, 3 * K}}},
		{"partial last unit", 5*K + 1, 2, K, []rdma.Slice{{0, 0, 3 * K}, {1, 3 * K, 2*K + 1}}},
		{"fewer units than NICs: no empty slice", 2*K + 1, 8, K, []rdma.Slice{{0, 0, K}, {1, K, K}, {2, 2 * K, 1}}},
		{"smaller than one unit", 100, 4, K, []rdma.Slice{{0, 0, 100}}},
		{"one byte", 1, 3, 1, []rdma.Slice{{0, 0, 1}}},
		{"byte alignment", 10, 3, 1, []rdma.Slice{{0, 0, 3}, {1, 3, 3}, {2, 6, 4}}},
		{"odd alignment", 100, 3, 7, []rdma.Slice{{0, 0, 35}, {1, 35, 35}, {2, 70, 30}}},
		{"huge transfer", 1 << 63, 2, 1 << 62, []rdma.Slice{{0, 0, 1 << 62}, {1, 1 << 62, 1 << 62}}},
		{"largest transfer", ^uint64(0), 2, 1 << 63, []rdma.Slice{{0, 0, 1 << 63}, {1, 1 << 63, 1<<63 - 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rdma.SplitTransfer(tc.n, tc.nics, tc.align)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
			checkSplit(t, got, tc.n, tc.nics, tc.align)
		})
	}
}

// checkSplit checks SplitTransfer's promises.
func checkSplit(t *testing.T, got []rdma.Slice, n uint64, nics int, align uint64) {
	t.Helper()
	require.NotEmpty(t, got)
	require.LessOrEqual(t, len(got), nics)
	var next uint64
	minLen, maxLen := ^uint64(0), uint64(0)
	for i, s := range got {
		require.Equal(t, i, s.NIC, "NIC index")
		require.Equal(t, next, s.Off, "slice %d: gap or overlap", i)
		require.NotZero(t, s.Len, "slice %d is empty", i)
		require.Zero(t, s.Off%align, "slice %d starts unaligned", i)
		if i < len(got)-1 {
			require.Zero(t, s.Len%align, "slice %d ends unaligned", i)
		}
		minLen, maxLen = min(minLen, s.Len), max(maxLen, s.Len)
		next = s.Off + s.Len
	}
	require.Equal(t, n, next, "bytes covered")
	require.LessOrEqual(t, maxLen-minLen, align, "balance")
	units := (n-1)/align + 1
	require.Equal(t, min(uint64(nics), units), uint64(len(got)), "as many slices as NICs, unless too few units")
}

func TestSplitTransferExhaustive(t *testing.T) {
	for _, align := range []uint64{1, 2, 3, 8, 4096} {
		for nics := 1; nics <= 9; nics++ {
			for n := uint64(1); n <= 12*align+3; n += max(1, align/7) {
				got, err := rdma.SplitTransfer(n, nics, align)
				require.NoError(t, err)
				checkSplit(t, got, n, nics, align)
			}
		}
	}
}

func TestSplitTransferInvalid(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     uint64
		nics  int
		align uint64
	}{
		{"zero bytes", 0, 2, 4096},
		{"no NIC", 4096, 0, 4096},
		{"negative NICs", 4096, -1, 4096},
		{"zero alignment", 4096, 2, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := rdma.SplitTransfer(tc.n, tc.nics, tc.align)
			assert.ErrorIs(t, err, rdma.ErrInvalid)
			assert.Empty(t, got)
		})
	}
}

func TestAppendSplitNoAlloc(t *testing.T) {
	buf := make([]rdma.Slice, 0, 4)
	allocs := testing.AllocsPerRun(100, func() {
		var err error
		buf, err = rdma.AppendSplit(buf[:0], 1<<20, 4, 4096)
		if err != nil {
			panic(err)
		}
	})
	assert.Zero(t, allocs)
	assert.Len(t, buf, 4)
}
