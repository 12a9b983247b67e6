package gaudi3

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// EnvIntelSources names an optional directory holding a copy of
// HabanaAI/Intel_Gaudi3_Software (at least specs_h9/gaudi3). When it is
// set, TestAgainstIntelHeaders compiles the C++ expression of every
// transcribed entry against Intel's register and packet headers with g++
// and compares the values with the transcription. No package ships those
// headers, so CI skips the test; run it by hand (docs/gaudi3.md).
const EnvIntelSources = "GXFER_G3SW_DIR"

// cxxPrelude includes the headers and defines MASK (the bits one field of
// a register occupies) and PMASK (the bits one packet field occupies in
// the dword at a byte offset).
const cxxPrelude = `#include <cstdio>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <linux/types.h>
#include "gaudi3.h"
#include "gaudi3_pqm_packets.h"
#include "asic_reg_structs/pdma_ch_a_regs.h"
#include "asic_reg_structs/pdma_ch_b_regs.h"
#include "asic_reg_structs/sob_objs_regs.h"
using namespace gaudi3;
#define MASK(T, f) ([] { T r; std::memset(&r, 0, sizeof r); r.f = ~0ull; return (unsigned long long)r._raw; }())
#define PMASK(T, f, off) ([] { T p; std::memset(&p, 0, sizeof p); p.f = ~0ull; uint32_t w; \
	std::memcpy(&w, (char *)&p + (off), 4); return (unsigned long long)w; }())
int main() {
`

func TestAgainstIntelHeaders(t *testing.T) {
	root := os.Getenv(EnvIntelSources)
	if root == "" {
		t.Skipf("%s is unset: the transcription is not compared with Intel's headers", EnvIntelSources)
	}
	type expr struct {
		name, cxx string
		want      uint64
	}
	var es []expr
	for _, n := range numbers() {
		if n.cxx != "" {
			es = append(es, expr{n.name, n.cxx, n.want})
		}
	}
	for _, b := range regFields() {
		es = append(es, expr{b.name, b.cxx, (uint64(1)<<b.width - 1) << b.shift})
	}
	for _, f := range packetFields() {
		if f.cxx != "" {
			es = append(es, expr{f.name, f.cxx, (uint64(1)<<f.width - 1) << f.shift})
		}
	}
	var src bytes.Buffer
	src.WriteString(cxxPrelude)
	for i, e := range es {
		fmt.Fprintf(&src, "\tstd::printf(\"%d %%llu\\n\", (unsigned long long)(%s));\n", i, e.cxx)
	}
	src.WriteString("\treturn 0;\n}\n")
	dir := t.TempDir()
	file := filepath.Join(dir, "probe.cpp")
	require.NoError(t, os.WriteFile(file, src.Bytes(), 0o600))
	spec := filepath.Join(root, "specs_h9", "gaudi3")
	bin := filepath.Join(dir, "probe")
	out, err := exec.Command("g++", "-std=gnu++17", "-w", "-I", spec, "-I", filepath.Join(spec, "asic_reg_structs"),
		"-o", bin, file).CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(bin).Output()
	require.NoError(t, err)
	got := map[int]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		idx, val, _ := strings.Cut(sc.Text(), " ")
		i, err1 := strconv.Atoi(idx)
		v, err2 := strconv.ParseUint(val, 10, 64)
		require.NoError(t, err1)
		require.NoError(t, err2)
		got[i] = v
	}
	require.Len(t, got, len(es))
	for i, e := range es {
		require.Equalf(t, e.want, got[i], "%s: transcribed %#x, Intel's header %#x (%s)", e.name, e.want, got[i], e.cxx)
	}
	t.Logf("%d transcribed entries agree with Intel's headers under %s", len(es), root)
}
