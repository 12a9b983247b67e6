package dma

import (
	"regexp"
	"strconv"
	"testing"
)

var (
	// releaseRE is a kernel release's major.minor ("6.1.0-18-amd64"),
	// numbers small enough for any int.
	releaseRE = regexp.MustCompile(`^([0-9]{1,9})\.([0-9]{1,9})(?:[^0-9]|$)`)
	// releaseLikeRE is what parseRelease may accept at all (strconv.Atoi
	// takes a sign).
	releaseLikeRE = regexp.MustCompile(`^[+-]?[0-9]+\.[0-9]+`)
)

// FuzzParseRelease: the release string comes from uname (the kernel's, or
// a Backend's KernelRelease): it picks the DMA-BUF export API
// (chooseExportAPI). parseRelease reads major.minor from any release that
// starts with them and accepts nothing that does not.
func FuzzParseRelease(f *testing.F) {
	for _, s := range []string{"6.1.0-18-amd64", "6.10", "5.15.0-91-generic", "6.8-rc3", "6", "x.1", "6.x", "+6.3", "99999999999999999999.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rel string) {
		ma, mi, ok := parseRelease(rel)
		if m := releaseRE.FindStringSubmatch(rel); m != nil {
			wma, _ := strconv.Atoi(m[1])
			wmi, _ := strconv.Atoi(m[2])
			if !ok || ma != wma || mi != wmi {
				t.Fatalf("parseRelease(%q) = %d, %d, %v; want %d.%d", rel, ma, mi, ok, wma, wmi)
			}
		}
		if ok && (!releaseLikeRE.MatchString(rel) || mi < 0) {
			t.Fatalf("parseRelease(%q) = %d, %d: not a release", rel, ma, mi)
		}
		if !ok && (ma != 0 || mi != 0) {
			t.Fatalf("parseRelease(%q) failed with %d, %d", rel, ma, mi)
		}
		if ok {
			want := ma > 6 || ma == 6 && mi >= 3
			if got := releaseAtLeast(rel, 6, 3); got != want {
				t.Fatalf("releaseAtLeast(%q, 6, 3) = %v for %d.%d", rel, got, ma, mi)
			}
		}
	})
}
