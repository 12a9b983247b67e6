package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/soak"
)

// A soak started by these tests re-executes the test binary as its peers
// ("soak -peer" with the soak's environment): serve as one before the
// testing package parses those arguments.
func init() {
	if soak.IsPeer() {
		os.Exit(soak.PeerMain(os.Stdin, os.Stdout))
	}
}

func TestSoakUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-duration", "0s"}, "bad -duration"},
		{[]string{"-procs", "17"}, "bad -procs"},
		{[]string{"-workers", "0"}, "bad -workers"},
		{[]string{"-workers", "48", "-procs", "1", "-duration", "1s", "-faults", "none", "-netns", "off"}, "bad -workers"},
		{[]string{"-faults", "cs-hang,nope"}, "bad -faults"},
		{[]string{"-fault-every", "-1s"}, "bad -fault-every"},
		{[]string{"-max-op", "0"}, "bad -max-op"},
		{[]string{"-netns", "maybe"}, "bad -netns"},
		{[]string{"-seed", "0"}, "bad -seed"},
		{[]string{"-peer"}, "-peer is internal"},
		{[]string{"extra"}, "unexpected argument"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errs := gxfer(t, append([]string{"soak"}, tc.args...)...)
			require.Equal(t, exitUsage, code, errs)
			require.Empty(t, out)
			require.Contains(t, errs, tc.want)
			require.Equal(t, 1, strings.Count(errs, "\n"), "one line on stderr: %q", errs)
		})
	}
}

func TestSoakHelp(t *testing.T) {
	code, out, _ := gxfer(t, "help", "soak")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "gxfer soak -duration 30m")
	for _, f := range soak.AllFaults {
		require.Contains(t, out, string(f))
	}
	code, out, _ = gxfer(t, "help")
	require.Equal(t, exitOK, code)
	require.Contains(t, out, "soak ")
}

// TestSoakCommand runs a short soak with one peer process (this test
// binary) and checks the command's plumbing: a summary, and an exit
// status that agrees with its result line. What the soak finds is
// package soak's test's business.
func TestSoakCommand(t *testing.T) {
	code, out, errs := gxfer(t, "soak", "-duration", "3s", "-procs", "1", "-workers", "2", "-max-op", "16384",
		"-faults", "peer-kill,stale-key,hostile", "-netns", "off", "-seed", "7")
	require.Contains(t, out, "soak: seed 7, 1 peer processes", errs)
	require.Contains(t, out, "faults injected:")
	require.Contains(t, out, "devices: emulated Gaudis (dma/hlsim)")
	require.Contains(t, out, "MiB verified byte for byte")
	switch {
	case strings.Contains(out, "result: PASS"):
		require.Equal(t, exitOK, code, errs)
	case strings.Contains(out, "result: FAIL"):
		require.Equal(t, exitRuntime, code, errs)
		require.Contains(t, errs, "the soak found problems")
	default:
		t.Fatalf("no result line:\n%s", out)
	}
}
