// Package uapicheck compares package hlsys with the kernel's habanalabs uAPI
// headers: every struct size, every field's offset and width, every
// constant, both ioctl numberings, and which union member each typed hlsys
// call fills and reads. It exists only for its tests; no other package
// imports it.
//
// Two header generations are ground truth, never a hand-typed copy:
//
//   - [Gen61]: include/uapi/misc/habanalabs.h of kernel 6.1, installed as
//     /usr/include/misc/habanalabs.h by Debian 12's linux-libc-dev. It has
//     the legacy 'H' ioctl numbering, the 256-byte hl_info_hw_ip_info and
//     the {handle, mem_size} DMA-BUF export form.
//   - [GenDRM]: include/uapi/drm/habanalabs_accel.h of kernel 6.12, from
//     bookworm-backports' linux-libc-dev, unpacked (never installed) by
//     fetch-new-header.sh. It has the DRM accel numbering (DRM_IOCTL_HL_*,
//     kernels 6.7 and later), the 304-byte hl_info_hw_ip_info and the
//     {addr, mem_size, offset} export form.
//
// The header values are read by generating a small C program whose output
// is the value of each C expression the check needs (offsetof, sizeof of a
// member, a macro), compiling it with gcc against one header generation and
// running it. The Go values come from reflection over hlsys's types, from
// hlsys's constants, and from calling hlsys's typed functions on a
// recording [hlsys.Backend] (see probe.go).
package uapicheck

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// EnvNewHeader names the environment variable holding the directory into
// which fetch-new-header.sh unpacked bookworm-backports' linux-libc-dev (the
// directory that contains usr/include/drm/habanalabs_accel.h).
const EnvNewHeader = "GXFER_UAPI_NEW_HEADER_DIR"

// Gen is one header generation.
type Gen struct {
	Name    string   // for messages, e.g. "6.1 misc/habanalabs.h"
	Include string   // the header, as #include <...> names it
	IDirs   []string // extra include directories, searched first
	DRM     bool     // the header has the DRM accel numbering and newer layouts
}

// Gen61 is the kernel 6.1 header of the installed linux-libc-dev.
func Gen61() Gen {
	return Gen{Name: "6.1 misc/habanalabs.h", Include: "misc/habanalabs.h"}
}

// GenDRM is the 6.12 header unpacked under root (root/usr/include/drm/
// habanalabs_accel.h). <drm/drm.h> and <linux/...> come from the same tree;
// the architecture's asm headers from its multiarch directory.
func GenDRM(root string) (Gen, error) {
	inc := filepath.Join(root, "usr", "include")
	if _, err := os.Stat(filepath.Join(inc, "drm", "habanalabs_accel.h")); err != nil {
		return Gen{}, fmt.Errorf("uapicheck: no drm/habanalabs_accel.h under %s: %w", root, err)
	}
	dirs := []string{inc}
	if out, err := exec.Command("gcc", "-print-multiarch").Output(); err == nil {
		if ma := strings.TrimSpace(string(out)); ma != "" {
			if _, err := os.Stat(filepath.Join(inc, ma)); err == nil {
				dirs = append(dirs, filepath.Join(inc, ma))
			}
		}
	}
	return Gen{Name: "6.12 drm/habanalabs_accel.h", Include: "drm/habanalabs_accel.h", IDirs: dirs, DRM: true}, nil
}

// Eval compiles a program that prints the value of every C expression in
// exprs, evaluated against g's header, runs it and returns the values by
// expression. Every expression must be an integer constant expression;
// FSIZE(T, member) is the size of a member.
func Eval(g Gen, exprs []string) (map[string]uint64, error) {
	dir, err := os.MkdirTemp("", "uapicheck")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)

	var src bytes.Buffer
	fmt.Fprintf(&src, "#include <stdio.h>\n#include <stddef.h>\n#include <fcntl.h>\n#include <linux/types.h>\n#include <linux/ioctl.h>\n#include <%s>\n", g.Include)
	src.WriteString("#define FSIZE(T, m) sizeof(((T *)0)->m)\nint main(void) {\n")
	for i, e := range exprs {
		fmt.Fprintf(&src, "\tprintf(\"%d %%llu\\n\", (unsigned long long)(%s));\n", i, e)
	}
	src.WriteString("\treturn 0;\n}\n")
	cfile := filepath.Join(dir, "probe.c")
	if err := os.WriteFile(cfile, src.Bytes(), 0o600); err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "probe")
	args := []string{"-std=gnu11", "-Wall", "-Werror", "-o", bin}
	for _, d := range g.IDirs {
		args = append(args, "-I", d)
	}
	args = append(args, cfile)
	if out, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("uapicheck: compiling against %s: %w\n%s", g.Name, err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		return nil, fmt.Errorf("uapicheck: running the %s probe: %w", g.Name, err)
	}
	vals := make(map[string]uint64, len(exprs))
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		idx, val, ok := strings.Cut(sc.Text(), " ")
		i, err1 := strconv.Atoi(idx)
		v, err2 := strconv.ParseUint(val, 10, 64)
		if !ok || err1 != nil || err2 != nil || i < 0 || i >= len(exprs) {
			return nil, fmt.Errorf("uapicheck: bad probe output line %q", sc.Text())
		}
		vals[exprs[i]] = v
	}
	if len(vals) != len(dedup(exprs)) {
		return nil, errors.New("uapicheck: probe printed fewer values than expressions")
	}
	return vals, nil
}

func dedup(s []string) map[string]bool {
	m := make(map[string]bool, len(s))
	for _, e := range s {
		m[e] = true
	}
	return m
}

// Fact is one comparison: a value the header gives and the value hlsys has.
type Fact struct {
	Key    string // what is compared, for messages and for the mutation tests
	Header uint64
	Go     uint64
}

// Mismatches returns one line per fact whose two sides differ.
func Mismatches(facts []Fact) []string {
	var bad []string
	for _, f := range facts {
		if f.Header != f.Go {
			bad = append(bad, fmt.Sprintf("%s: header %#x, hlsys %#x", f.Key, f.Header, f.Go))
		}
	}
	return bad
}

// Check builds every fact of spec against generation g: it evaluates the
// header expressions, then compares layouts, constants and probes.
func Check(g Gen, spec Spec) ([]Fact, error) {
	hdr, err := Eval(g, spec.exprs(g))
	if err != nil {
		return nil, err
	}
	return Compare(g, spec, hdr)
}

// Compare is Check with the header values already evaluated (by Eval of a
// superset of spec's expressions).
func Compare(g Gen, spec Spec, hdr map[string]uint64) ([]Fact, error) {
	for _, e := range spec.exprs(g) {
		if _, ok := hdr[e]; !ok {
			return nil, fmt.Errorf("uapicheck: %q was not evaluated", e)
		}
	}
	var facts []Fact
	for _, l := range spec.Layouts {
		facts = append(facts, l.facts(hdr)...)
	}
	for _, c := range spec.Consts {
		if c.Gens.has(g) {
			facts = append(facts, Fact{Key: c.C, Header: hdr[c.C], Go: c.Val})
		}
	}
	for _, p := range spec.Probes {
		if p.Gens.has(g) {
			facts = append(facts, p.run(g, hdr)...)
		}
	}
	return facts, nil
}

// Gens says which header generations an entry applies to.
type Gens uint8

const (
	Only61  Gens = 1 << iota // the 6.1 header only
	OnlyDRM                  // the 6.12 (DRM accel) header only
	Both    = Only61 | OnlyDRM
)

func (s Gens) has(g Gen) bool {
	if g.DRM {
		return s&OnlyDRM != 0
	}
	return s&Only61 != 0
}

// Spec is everything the check compares; DefaultSpec is hlsys's. The
// mutation tests alter copies of it.
type Spec struct {
	Layouts []Layout
	Consts  []Const
	Probes  []Probe
}

// Exprs is every header expression spec needs for generation g.
func (s Spec) Exprs(g Gen) []string { return s.exprs(g) }

// DefaultSpec is the complete check of hlsys for generation g.
func DefaultSpec(g Gen) Spec {
	return Spec{Layouts: Layouts(g), Consts: append(Consts(), gaudi3Consts()...), Probes: append(Probes(), gaudi3Probes()...)}
}

func (s Spec) exprs(g Gen) []string {
	var e []string
	for _, l := range s.Layouts {
		e = append(e, l.exprs()...)
	}
	for _, c := range s.Consts {
		if c.Gens.has(g) {
			e = append(e, c.C)
		}
	}
	for _, p := range s.Probes {
		if p.Gens.has(g) {
			e = append(e, p.exprs(g)...)
		}
	}
	return e
}
