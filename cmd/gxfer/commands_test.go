package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestUsageErrorsNameEveryCommand: the usage errors that list the
// commands (a missing or unknown command, and help's) name every command
// gxfer has, soak and agents too.
func TestUsageErrorsNameEveryCommand(t *testing.T) {
	for _, args := range [][]string{
		nil,
		{"frobnicate"},
		{"help", "nope"},
		{"help", "perf", "info"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			code, out, errs := gxfer(t, args...)
			assert.Equal(t, 2, code, errs)
			assert.Empty(t, out)
			assert.Equal(t, 1, strings.Count(errs, "\n"), "one line: %q", errs)
			for _, c := range commands() {
				assert.Contains(t, errs, c.name, "the list names %s: %q", c.name, errs)
			}
		})
	}
}
