package synapse

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// nsChildEnv selects TestCheckNodeDriverChild's role in a re-executed
// test binary.
const nsChildEnv = "GXFER_SYNAPSE_NS_CHILD"

// TestCheckNodeAcceptsOnlyHabanalabsAccel: /dev/accel/accelN is the node
// of every DRM accel driver (habanalabs, ivpu, qaic, amdxdna, ...), and
// Discover keeps an accel node only when sysfs says its driver is
// habanalabs. CheckNode (BorrowFD, FindRuntime) took any accel node by its
// name, so an fd of another accel driver passed the check and was sent
// habanalabs INFO and EXPORT ioctls. The child, in a mount namespace of
// its own, makes two accel nodes (a tmpfs over /dev, /dev/null's device
// number for one, /dev/zero's for the other) and a sysfs driver link for
// each (a tmpfs over /sys/dev: habanalabs and ivpu), an accel node sysfs
// says nothing of, and two legacy /dev/hlN nodes (no sysfs device, and one
// of another driver). Needs root (mount, mknod).
func TestCheckNodeAcceptsOnlyHabanalabsAccel(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount in a mount namespace of its own")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCheckNodeDriverChild$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), nsChildEnv+"=1")
	// Go makes the new namespace's mounts private before the exec, so the
	// child's mounts never reach this one.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EINVAL) {
		t.Skipf("no mount namespace here: %v", err) // the unshare before the exec was refused
	}
	if bytes.Contains(out.Bytes(), []byte("child: cannot mount")) {
		t.Skipf("no mount namespace here: %s", out.String())
	}
	require.NoError(t, err, "%s", out.String())
	require.Contains(t, out.String(), "child: checked")
}

// TestCheckNodeDriverChild is TestCheckNodeAcceptsOnlyHabanalabsAccel's
// child; it does nothing in a normal run.
func TestCheckNodeDriverChild(t *testing.T) {
	if os.Getenv(nsChildEnv) == "" {
		return
	}
	if err := unix.Mount("none", "/dev", "tmpfs", 0, "mode=0755"); err != nil {
		t.Logf("child: cannot mount: %v", err)
		return
	}
	if err := unix.Mount("none", "/sys/dev", "tmpfs", 0, "mode=0755"); err != nil {
		t.Logf("child: cannot mount: %v", err)
		return
	}
	require.NoError(t, os.Mkdir("/dev/accel", 0o755))
	for _, n := range []struct {
		node     string
		maj, min uint32
		driver   string
	}{
		{"/dev/accel/accel0", 1, 3, "habanalabs"},
		{"/dev/accel/accel1", 1, 5, "ivpu"},
		{"/dev/accel/accel2", 1, 7, ""},
		{"/dev/hl0", 1, 8, ""},
		{"/dev/hl1", 1, 9, "qaic"},
	} {
		require.NoError(t, unix.Mknod(n.node, unix.S_IFCHR|0o600, int(unix.Mkdev(n.maj, n.min))))
		if n.driver == "" {
			continue // no sysfs device
		}
		dev := filepath.Join("/sys/dev/char", fmt.Sprintf("%d:%d", n.maj, n.min), "device")
		require.NoError(t, os.MkdirAll(dev, 0o755))
		require.NoError(t, os.Symlink("../../../bus/pci/drivers/"+n.driver, filepath.Join(dev, "driver")))
	}
	for _, tc := range []struct {
		node string
		ok   bool
		why  string
	}{
		{"/dev/accel/accel0", true, ""},
		{"/dev/accel/accel1", false, "ivpu"},
		{"/dev/accel/accel2", false, "does not name"},
		{"/dev/hl0", true, ""}, // the driver's own class: taken without sysfs, as Discover does
		{"/dev/hl1", false, "qaic"},
	} {
		f, err := os.OpenFile(tc.node, os.O_RDWR, 0)
		require.NoError(t, err)
		p, err := CheckNode(int(f.Fd()))
		if tc.ok {
			require.NoError(t, err, tc.node)
			require.Equal(t, tc.node, p)
		} else {
			require.Error(t, err, "%s: an accel node of another driver taken for a habanalabs compute node", tc.node)
			require.Contains(t, err.Error(), tc.why)
		}
		require.NoError(t, f.Close())
	}
	t.Log("child: checked")
}
