package soak

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/engine"
)

// keysPeer answers each "keys" command with the next key generations of
// gens, as a peer process's stdin and stdout would.
type keysPeer struct {
	lines chan string
	gens  []int
	key   string
}

func (k *keysPeer) Write(b []byte) (int, error) {
	f := strings.Fields(string(b))
	g := k.gens[0]
	k.gens = k.gens[1:]
	k.lines <- fmt.Sprintf("%s KEYS 1 %d 0 %s %s %s %s", f[0], g, k.key, k.key, k.key, k.key)
	return len(b), nil
}

func (k *keysPeer) Close() error { return nil }

// TestRefreshKeysOutOfOrder: two refreshes of a peer's keys run at once
// (CS faults of several kinds follow the same peer). The first got the
// older answer but took it into the view after the second had taken the
// newer one, and the soak reported a false violation: "key generation of
// gaudi0 went back from 38 to 37". An answer older than the view's is
// now ignored.
func TestRefreshKeysOutOfOrder(t *testing.T) {
	e, err := engine.New(engine.Config{Devices: engine.DevicesNone})
	require.NoError(t, err)
	defer func() { require.NoError(t, e.Close()) }()
	b, err := e.Alloc(4096, engine.Host)
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Free()) }()
	key, err := b.Export()
	require.NoError(t, err)

	peer := &keysPeer{lines: make(chan string, 2), gens: []int{37, 38}, key: keyHex(key)}
	p := &peerProc{d: &driver{t: newTally()}, stdin: peer, lines: peer.lines,
		view: peerView{gen: 1, alive: true, rwHost: key, roHost: key, kgen: [2]int{36, 0}}}
	var second error
	calls := 0
	afterKeysAnswer = func() {
		if calls++; calls == 1 {
			second = p.refreshKeys() // runs whole between the first's answer and its use
		}
	}
	defer func() { afterKeysAnswer = nil }()
	require.NoError(t, p.refreshKeys())
	require.NoError(t, second)
	require.Equal(t, [2]int{38, 0}, p.snapshot().kgen)
	require.Empty(t, p.d.t.violations)
}
