package soak

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// netns is two network namespaces the run creates, joined by a veth pair:
// A holds peer 0's TCP address, the driver dials it from B. Taking the
// veth down in A is the link fault.
type netns struct {
	a, b         string
	vethA, vethB string
	addrA, addrB string
}

// setupNetns creates the namespaces, or says why it cannot.
func setupNetns(seed int64) (*netns, string) {
	if os.Geteuid() != 0 {
		return nil, "creating network namespaces needs root"
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, "the ip command (iproute2) is not installed"
	}
	removeOrphans()
	tag := fmt.Sprintf("%d", os.Getpid()) // at most 7 digits: veth names stay within 15 bytes
	sub := 1 + (os.Getpid()+int(seed&0xff))%250
	n := &netns{a: "gxsa" + tag, b: "gxsb" + tag, vethA: "gxsa" + tag, vethB: "gxsb" + tag,
		addrA: fmt.Sprintf("10.216.%d.1", sub), addrB: fmt.Sprintf("10.216.%d.2", sub)}
	steps := [][]string{
		{"netns", "add", n.a},
		{"netns", "add", n.b},
		{"link", "add", n.vethA, "netns", n.a, "type", "veth", "peer", "name", n.vethB, "netns", n.b},
		{"-n", n.a, "addr", "add", n.addrA + "/24", "dev", n.vethA},
		{"-n", n.b, "addr", "add", n.addrB + "/24", "dev", n.vethB},
		{"-n", n.a, "link", "set", n.vethA, "up"},
		{"-n", n.b, "link", "set", n.vethB, "up"},
		{"-n", n.a, "link", "set", "lo", "up"},
		{"-n", n.b, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := n.ip(s...); err != nil {
			n.teardown()
			return nil, err.Error()
		}
	}
	return n, ""
}

func (n *netns) ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// link sets the veth in A up or down.
func (n *netns) link(up bool) error {
	state := "down"
	if up {
		state = "up"
	}
	return n.ip("-n", n.a, "link", "set", n.vethA, state)
}

func (n *netns) teardown() {
	_ = exec.Command("ip", "netns", "del", n.a).Run()
	_ = exec.Command("ip", "netns", "del", n.b).Run()
}

// inB runs fn on a thread switched into namespace B, on a goroutine of its
// own whose thread the runtime then retires (it is never switched back):
// sockets fn creates live in B.
func (n *netns) inB(fn func()) error {
	done := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open("/run/netns/" + n.b)
		if err != nil {
			done <- err
			return
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		_ = f.Close()
		if err != nil {
			done <- fmt.Errorf("setns %s: %w", n.b, err)
			return
		}
		fn()
		done <- nil
	}()
	return <-done
}

// removeOrphans deletes the namespaces of soaks whose process died
// without cleaning up (a crash, SIGKILL): their names carry the pid.
func removeOrphans() {
	ents, err := os.ReadDir("/run/netns")
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, "gxsa")
		if !ok {
			rest, ok = strings.CutPrefix(name, "gxsb")
		}
		pid, err := strconv.Atoi(rest)
		if !ok || err != nil || pid <= 0 {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // its soak (or a process that took its pid) is alive
		}
		_ = exec.Command("ip", "netns", "del", name).Run()
	}
}
