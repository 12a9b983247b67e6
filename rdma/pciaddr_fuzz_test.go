package rdma_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/gxfer/gxfer/rdma"
)

// pciAddrRE is the sysfs form of a PCI address, written independently of
// ParsePCIAddr: a 4..8 hex digit domain, bus, device (0..1f), function.
var pciAddrRE = regexp.MustCompile(`^[0-9a-f]{4,8}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]$`)

// FuzzParsePCIAddr: a PCI address (a flag, or read from sysfs) names a
// directory under /sys/bus/pci/devices. ParsePCIAddr accepts exactly the
// sysfs form, in either case, and returns it in lower case (so nothing
// else, say a path, gets through); anything else is ErrInvalid.
func FuzzParsePCIAddr(f *testing.F) {
	for _, s := range []string{"0000:33:00.0", "0000:B3:1F.7", "10000:e1:00.0", "0000:33:20.0", "0000:33:00.8",
		"0000:33:00.0/../x", "123456789:00:00.0", "\u212a000:33:00.0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := rdma.ParsePCIAddr(in)
		want := strings.ToLower(in)
		if pciAddrRE.MatchString(want) {
			if err != nil || got != want {
				t.Fatalf("ParsePCIAddr(%q) = %q, %v; want %q", in, got, err, want)
			}
			return
		}
		if err == nil || !errors.Is(err, rdma.ErrInvalid) || got != "" {
			t.Fatalf("ParsePCIAddr(%q) = %q, %v; want ErrInvalid", in, got, err)
		}
	})
}
