package uapicheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// notInHeader lists hlsys's exported names the uAPI headers do not define,
// with the reason; everything else hlsys exports must be referenced by the
// check (consts.go, layouts.go, probes.go).
var notInHeader = map[string]string{
	// Go-side numbering type; the requests of both numberings are checked.
	"Numbering": "Go enum type",
	// Go types with no C counterpart.
	"Error": "Go error type", "FDBackend": "Go type over a device fd",
	// Raw pass-throughs: every typed call goes through one of them and its
	// request number is checked by that call's probe; Decode by TestDecode.
	"Info": "raw ioctl", "CommandBuffer": "raw ioctl", "CommandSubmission": "raw ioctl",
	"WaitCS": "raw ioctl", "Memory": "raw ioctl", "Decode": "TestDecode",
	"OpenFD": "opens a node", "NumberingForNode": "node path rule",
	"IoctlFD": "raw ioctl on an fd (EINTR rule: TestRestartEINTR)", "Restartable": "EINTR rule (TestRestartEINTR)",
	"WaitForCS": "WaitForCSIn with an argument struct of its own (probed)",
	// PCI ids: driver-internal (drivers/accel/habanalabs/common/habanalabs.h,
	// include/linux/pci_ids.h), not in the uAPI.
	"PCIVendorHabana": "PCI id", "DeviceIDGoya": "PCI id", "DeviceIDGaudi": "PCI id",
	"DeviceIDGaudiSec": "PCI id", "DeviceIDGaudi2": "PCI id", "DeviceIDGaudi3": "PCI id",
	"DeviceIDGaudi3Die1": "PCI id", "DeviceIDGaudi3SingleDie": "PCI id", "DeviceIDGaudi3HL338": "PCI id",
	"IsGaudi3": "PCI id test",
	// HL_MMAP_TYPE_CB is driver-internal (common/habanalabs.h).
	"MmapTypeCB": "driver-internal mmap offset type", "MmapTypeBlock": "driver-internal mmap offset type",
	// Packet formats are driver-internal (include/gaudi/gaudi_packets.h,
	// include/gaudi2/gaudi2_packets.h); linux-libc-dev does not ship them.
	"PacketWReg32": "packet", "PacketMsgLong": "packet", "PacketMsgShort": "packet",
	"PacketFence": "packet", "PacketLinDMA": "packet", "PacketNOP": "packet", "PacketStop": "packet",
	"LinDMAPacketSize": "packet", "NOPPacketSize": "packet", "CtlOpcodeShift": "packet",
	"CtlOpcodeMask": "packet", "CtlEB": "packet", "CtlRB": "packet", "CtlMB": "packet",
	"LinDMAWrCompEn": "packet", "LinDMALin": "packet", "LinDMAMemSet": "packet",
	"Gaudi1DstAddrMask": "packet", "LinDMAMaxTSize": "gxfer's own chunk limit",
}

// exported returns hlsys's exported top-level names (constants, variables,
// types, functions; not methods), from its non-test sources.
func exported(t *testing.T) map[string]bool {
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join("..", "*.go"))
	require.NoError(t, err)
	names := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range af.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					names[d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names[n.Name] = true
							}
						}
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names[s.Name.Name] = true
						}
					}
				}
			}
		}
	}
	require.NotEmpty(t, names)
	return names
}

// referenced returns every hlsys.X the check's own sources use.
func referenced(t *testing.T) map[string]bool {
	fset := token.NewFileSet()
	refs := map[string]bool{}
	for _, f := range []string{"consts.go", "layouts.go", "probes.go", "gaudi3.go"} {
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		af, err := parser.ParseFile(fset, f, src, parser.SkipObjectResolution)
		require.NoError(t, err)
		ast.Inspect(af, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == "hlsys" {
					refs[sel.Sel.Name] = true
				}
			}
			return true
		})
	}
	return refs
}

// TestEveryExportIsChecked fails when hlsys exports a name that the header
// check neither compares nor lists, with a reason, as absent from the uAPI.
func TestEveryExportIsChecked(t *testing.T) {
	exp, refs := exported(t), referenced(t)
	var missing, stale []string
	for n := range exp {
		if !refs[n] && notInHeader[n] == "" {
			missing = append(missing, n)
		}
	}
	for n := range notInHeader {
		if !exp[n] || refs[n] {
			stale = append(stale, n)
		}
	}
	sort.Strings(missing)
	sort.Strings(stale)
	require.Empty(t, missing, "hlsys exports these without a header check or a reason in notInHeader")
	require.Empty(t, stale, "notInHeader lists names hlsys does not export or the check does reference")
}
