package ipc

import (
	"os"
	"testing"

	"github.com/gxfer/gxfer/internal/testutil"
)

// TestMain runs a child role when the test binary was re-executed as a
// peer process (see startChild), and the tests otherwise.
func TestMain(m *testing.M) {
	if role := os.Getenv(childRoleEnv); role != "" {
		os.Exit(runChild(role))
	}
	testutil.Main(m)
}
