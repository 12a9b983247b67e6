package engine

// Regression tests for defects found in review of the cross-process code.

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/ctrlchan"
	fdpkg "github.com/gxfer/gxfer/internal/fd"
	"github.com/gxfer/gxfer/internal/handshake"
	"github.com/gxfer/gxfer/ipc"
	"github.com/gxfer/gxfer/wire"
)

// rawPeer is a hand-driven peer: an ipc.Conn and a wire.Conn, no engine.
type rawPeer struct {
	c     *wire.Conn
	ic    *ipc.Conn
	hello wire.Hello
}

func rawHello(pid uint32) wire.Hello {
	ns, _ := ipc.PIDNamespace()
	h := wire.Hello{MinVersion: wire.MinVersion, MaxVersion: wire.MaxVersion,
		Caps: wire.CapFDPassing | wire.CapSharedHost, PID: pid, PIDNamespace: ns,
		UID: 0, Name: "evil"}
	_, _ = rand.Read(h.EngineID[:])
	return h
}

// dialRaw connects to an engine's listener and handshakes as hello.
func dialRaw(t testing.TB, path string, hello wire.Hello) *rawPeer {
	t.Helper()
	ic, err := ipc.Dial(context.Background(), path, ipc.Config{})
	require.NoError(t, err)
	c := wire.NewConn(ic, wire.ConnConfig{MaxFrame: handshake.IPCMaxFrame})
	require.NoError(t, c.Send(&hello))
	f, err := c.Recv(context.Background())
	require.NoError(t, err)
	var ack wire.HelloAck
	require.NoError(t, f.Decode(&ack))
	return &rawPeer{c: c, ic: ic, hello: hello}
}

// listenRaw accepts one engine and handshakes as hello.
func listenRaw(t testing.TB, hello wire.Hello) (string, chan *rawPeer) {
	path := filepath.Join(t.TempDir(), "raw.sock")
	l, err := ipc.Listen(path, ipc.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	ch := make(chan *rawPeer, 1)
	go func() {
		ic, err := l.Accept(context.Background())
		if err != nil {
			return
		}
		c := wire.NewConn(ic, wire.ConnConfig{MaxFrame: handshake.IPCMaxFrame})
		f, err := c.Recv(context.Background())
		if err != nil {
			return
		}
		var h wire.Hello
		if f.Decode(&h) != nil {
			return
		}
		ack, _ := wire.Negotiate(hello, h)
		_ = c.Send(&ack)
		ch <- &rawPeer{c: c, ic: ic, hello: hello}
	}()
	return path, ch
}

func (p *rawPeer) recv(t testing.TB) (wire.Frame, wire.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	f, err := p.c.Recv(ctx)
	require.NoError(t, err)
	m, err := f.Message()
	require.NoError(t, err)
	return f, m
}

// 1. A peer whose Hello claims another pid than SO_PEERCRED reports is
// refused at the handshake.
func TestIPCRegressHelloPIDNotChecked(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	l, err := e.Listen("unix", filepath.Join(t.TempDir(), "e.sock"))
	require.NoError(t, err)
	ic, err := ipc.Dial(context.Background(), l.Addr(), ipc.Config{})
	require.NoError(t, err)
	c := wire.NewConn(ic, wire.ConnConfig{MaxFrame: handshake.IPCMaxFrame})
	defer c.Close()
	h := rawHello(1) // claims to be init
	require.NoError(t, c.Send(&h))
	f, err := c.Recv(context.Background())
	if err == nil {
		m, derr := f.Message()
		require.NoError(t, derr)
		require.IsType(t, &wire.Error{}, m, "the spoofed hello is refused")
		require.Equal(t, wire.StatusRefused, m.(*wire.Error).Code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = l.Accept(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "no endpoint for a spoofed peer")
}

// 2. Cache poisoning: a peer that claims another engine's identity and
// allocation ids cannot plant its memfd where E looks up that engine's
// buffers (imports are keyed by the verified pid and the engine id).
func TestIPCRegressCachePoisonBySpoofedPID(t *testing.T) {
	v := startPeer(t) // victim: a separate process
	e := newEngine(t, Config{Emulator: EmulatorConfig{DRAMSize: 256 << 20}})
	l, err := e.Listen("unix", filepath.Join(t.TempDir(), "e.sock"))
	require.NoError(t, err)
	scratch, _ := e.Alloc(peerSize, Host) // a request as large as the allocation the attacker claims
	sk, err := scratch.Export()
	require.NoError(t, err)

	// The attacker (honest pid: a spoofed one is refused) claims the
	// victim's engine id and names the victim's allocation.
	h := rawHello(uint32(os.Getpid()))
	h.EngineID = v.host.k.Owner
	a := dialRaw(t, l.Addr(), h)
	defer a.c.Close()
	evil, err := ipc.NewShared(peerSize, "evil")
	require.NoError(t, err)
	defer evil.Close()
	vk := v.host.k
	local := wire.RemoteKey{Owner: a.hello.EngineID, AllocID: vk.AllocID, Generation: vk.Generation, GrantLen: vk.Length,
		MemType: wire.MemHost, Device: -1, Flags: wire.KeyRead | wire.KeyWrite, Length: vk.Length, Len: vk.Length}
	req := wire.Request{RequestID: 1, Key: sk.k, Length: vk.Length,
		Local: wire.Local{Kind: wire.LocalKey, Key: local}}
	require.NoError(t, a.c.Send(&wire.Get{Request: req}))
	_, m := a.recv(t)
	ir, ok := m.(*wire.ImportRequest)
	require.True(t, ok, "%T", m)
	require.NoError(t, a.c.Send(&wire.ImportReply{RequestID: ir.RequestID, AllocID: vk.AllocID,
		Generation: vk.Generation, Kind: wire.FDMemfd, Size: vk.Length}, evil.FD(), testValidity(t).FD()))
	_, _ = a.recv(t)

	ctx := context.Background()
	epV, err := e.Dial(ctx, "unix", v.path)
	require.NoError(t, err)
	secret, _ := e.Alloc(4096, Host)
	copy(secret.Bytes(), "TOP SECRET for V")
	require.NoError(t, epV.PutSync(ctx, secret.Slice(0, 16), v.host.Slice(0, 16)))
	require.NotEqual(t, "TOP SECRET for V", string(evil.Bytes()[:16]), "E's Put to V landed in the attacker's memory")
	back, _ := e.Alloc(16, Host)
	require.NoError(t, epV.GetSync(ctx, back.All(), v.host.Slice(0, 16)))
	require.Equal(t, "TOP SECRET for V", string(back.Bytes()))
}

// 3. Two engines in one process share a PeerID; their AllocIDs collide and
// the older engine's keys are refused as stale by a third engine's cache.
func TestIPCRegressTwoEnginesOneProcess(t *testing.T) {
	ctx := context.Background()
	cfg := Config{Devices: DevicesNone}
	var keys []RemoteKey
	var paths []string
	for i := 0; i < 2; i++ {
		v := newEngine(t, cfg)
		l, err := v.Listen("unix", filepath.Join(t.TempDir(), "v.sock"))
		require.NoError(t, err)
		b, _ := v.Alloc(4096, Host)
		k, err := b.Export()
		require.NoError(t, err)
		keys, paths = append(keys, k), append(paths, l.Addr())
		time.Sleep(time.Millisecond)
	}
	e := newEngine(t, cfg)
	src, _ := e.Alloc(4096, Host)
	ep1, err := e.Dial(ctx, "unix", paths[0])
	require.NoError(t, err)
	ep2, err := e.Dial(ctx, "unix", paths[1])
	require.NoError(t, err)
	t.Logf("alloc ids %d %d, generations %d %d", keys[0].k.AllocID, keys[1].k.AllocID, keys[0].k.Generation, keys[1].k.Generation)
	require.NoError(t, ep1.PutSync(ctx, src.All(), keys[0]))
	require.NoError(t, ep2.PutSync(ctx, src.All(), keys[1]))
	err = ep1.PutSync(ctx, src.All(), keys[0])
	t.Logf("second put to engine 1: %v", err)
	require.NoError(t, err, "a valid key of engine 1 is refused because engine 2 (same pid) used the same AllocID")
}

// 4. A peer that stops reading blocks Send forever: the engine's reader
// (shm.Path.serveImport replies inline), Endpoint.Close/Engine.Close (Bye is sent
// before the socket is closed) and every Free of an exported buffer
// (shm.Transport.Freeing, possibly on a device CQ actor) hang.
func TestIPCRegressStuckPeerHangsEngine(t *testing.T) {
	e, err := New(Config{Devices: DevicesNone})
	require.NoError(t, err)
	l, err := e.Listen("unix", filepath.Join(t.TempDir(), "e.sock"))
	require.NoError(t, err)
	a := dialRaw(t, l.Addr(), rawHello(uint32(os.Getpid())))
	// Valid-looking ImportRequests: each is answered inline by E's reader
	// (an Error), which the attacker never reads.
	var bogus wire.RemoteKey
	bogus = wire.RemoteKey{MemType: wire.MemHost, Device: -1, Flags: wire.KeyRead, Length: 1, GrantLen: 1, Len: 1}
	_ = a.ic.SetWriteDeadline(time.Now().Add(3 * time.Second))
	sent := 0
	for i := 0; i < 20000; i++ {
		if err := a.c.Send(&wire.ImportRequest{RequestID: uint64(i + 1), Key: bogus}); err != nil {
			break
		}
		sent++
	}
	t.Logf("attacker sent %d requests before its own send blocked", sent)

	// A Free of an exported buffer (the user's goroutine here; a CQ actor
	// when an op held the last reference).
	b, _ := e.Alloc(4096, Host)
	_, err = b.Export()
	require.NoError(t, err)
	freed := make(chan struct{})
	go func() { _ = b.Free(); close(freed) }()
	closed := make(chan struct{})
	go func() { _ = e.Close(); close(closed) }()
	var freeHung, closeHung bool
	select {
	case <-freed:
	case <-time.After(3 * time.Second):
		freeHung = true
	}
	select {
	case <-closed:
	case <-time.After(3 * time.Second):
		closeHung = true
	}
	t.Logf("Free hung: %v, Engine.Close hung: %v", freeHung, closeHung)
	a.c.Close() // unblock everything
	<-closed
	<-freed
	require.False(t, freeHung || closeHung, "a peer that does not read hangs Free and Close")
}

// 5. The reader goroutine blocks on the serve semaphore; the 64 serve
// goroutines wait for ImportReplies only the reader can deliver: a peer
// with 65 requests in flight stalls the endpoint for importTimeout (10 s)
// and every request fails, although the peer answers at once.
func TestIPCRegressReaderBlocksOnSem(t *testing.T) {
	e := newEngine(t, Config{Emulator: EmulatorConfig{DRAMSize: 256 << 20}})
	l, err := e.Listen("unix", filepath.Join(t.TempDir(), "e.sock"))
	require.NoError(t, err)
	dev, _ := e.Alloc(1<<20, Gaudi(0))
	dk, err := dev.Export()
	require.NoError(t, err)
	a := dialRaw(t, l.Addr(), rawHello(uint32(os.Getpid())))
	defer a.c.Close()
	mem, err := ipc.NewShared(4096*100, "peer")
	require.NoError(t, err)
	defer mem.Close()
	const n = ctrlchan.MaxServing + 1
	t0 := time.Now()
	for i := 0; i < n; i++ { // each with its own local buffer (like bounce buffers)
		local := wire.RemoteKey{Owner: a.hello.EngineID, AllocID: uint64(1000 + i), Generation: 1,
			MemType: wire.MemHost, Device: -1, Flags: wire.KeyRead | wire.KeyWrite, Length: 4096 * 100, GrantLen: 4096 * 100, Len: 4096 * 100}
		req := wire.Request{RequestID: uint64(i + 1), Key: dk.k, Offset: uint64(i) * 4096, Length: 4096,
			Local: wire.Local{Kind: wire.LocalKey, Key: local}}
		require.NoError(t, a.c.Send(&wire.Put{Request: req}))
	}
	ok, failed := 0, 0
	for ok+failed < n {
		_, m := a.recv(t)
		switch m := m.(type) {
		case *wire.ImportRequest: // answered at once
			require.NoError(t, a.c.Send(&wire.ImportReply{RequestID: m.RequestID, AllocID: m.Key.AllocID,
				Generation: 1, Kind: wire.FDMemfd, Size: m.Key.Length}, mem.FD(), testValidity(t).FD()))
		case *wire.Completion:
			ok++
		case *wire.Error:
			failed++
			if failed == 1 {
				t.Logf("first error after %v: %v", time.Since(t0), m)
			}
		}
	}
	t.Logf("%d ok, %d failed in %v", ok, failed, time.Since(t0))
	require.Less(t, time.Since(t0), 8*time.Second, "the reader blocked on the serve semaphore until the 10 s import timeout")
}

// 6. Put ignores ctx (and Timeout) while importing: a peer that does not
// answer the ImportRequest holds the caller for importTimeout (10 s), and
// the error is ErrPeer, not ErrTimeout / context.DeadlineExceeded.
func TestIPCRegressPutIgnoresCtxDuringImport(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	h := rawHello(uint32(os.Getpid()))
	path, ch := listenRaw(t, h)
	ep, err := e.Dial(context.Background(), "unix", path)
	require.NoError(t, err)
	p := <-ch
	defer p.c.Close()
	k := wire.RemoteKey{Owner: h.EngineID, AllocID: 7, Generation: 1, MemType: wire.MemHost, Device: -1,
		Flags: wire.KeyRead | wire.KeyWrite, Length: 4096, GrantLen: 4096, Len: 4096}
	local, _ := e.Alloc(4096, Host)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	f := ep.Put(ctx, local.All(), RemoteKey{k: k}, Timeout(200*time.Millisecond))
	el := time.Since(t0)
	<-f.Done()
	t.Logf("Put returned after %v: %v (ErrTimeout %v, DeadlineExceeded %v)", el, f.Err(),
		errors.Is(f.Err(), ErrTimeout), errors.Is(f.Err(), context.DeadlineExceeded))
	require.Less(t, el, 8*time.Second, "Put blocked past its ctx until the 10 s import timeout")
}

// 7. Put into a peer's Gaudi memory must not hand the peer a key to the
// caller's whole buffer: the peer gets a scratch buffer of the op's size.
func TestIPCRegressImplicitExportGrantsWholeBufferRW(t *testing.T) {
	e := newEngine(t, Config{Devices: DevicesNone})
	h := rawHello(uint32(os.Getpid()))
	path, ch := listenRaw(t, h)
	ep, err := e.Dial(context.Background(), "unix", path)
	require.NoError(t, err)
	p := <-ch
	defer p.c.Close()
	// The peer's (claimed) Gaudi buffer key.
	gk := wire.RemoteKey{Owner: h.EngineID, AllocID: 7, Generation: 1, MemType: wire.MemGaudi, Device: 0,
		Flags: wire.KeyRead | wire.KeyWrite, Length: 1 << 20, GrantLen: 1 << 20, Len: 1 << 20}
	local, _ := e.Alloc(1<<20, Host)
	copy(local.Bytes()[4096:], "untouched")
	var wg sync.WaitGroup
	wg.Add(1)
	var lk wire.RemoteKey
	go func() { // the peer
		defer wg.Done()
		_, m := p.recv(t)
		put := m.(*wire.Put)
		lk = put.Local.Key
		_ = p.c.Send(&wire.Completion{RequestID: put.RequestID})
		lk.Offset, lk.Len = 0, lk.Length
		_ = p.c.Send(&wire.ImportRequest{RequestID: 99, Key: lk})
		f, m := p.recv(t)
		ir, ok := m.(*wire.ImportReply)
		if !ok { // refused: the scratch buffer is already gone
			return
		}
		mp, err := ipc.MapShared(f.FDs[0], int(ir.Size))
		if err == nil {
			if b := mp.Bytes(); len(b) > 4096 {
				copy(b[4096:], "OVERWRITE")
			}
			mp.Close()
		}
		f.CloseFDs()
	}()
	require.NoError(t, ep.PutSync(context.Background(), local.Slice(0, 16), RemoteKey{k: gk}.Slice(0, 16)))
	wg.Wait()
	t.Logf("local key handed to the peer: view [%d,+%d) of %d bytes, flags %v; local[4096:] = %q",
		lk.Offset, lk.Len, lk.Length, lk.Flags, local.Bytes()[4096:4105])
	require.Equal(t, "untouched", string(local.Bytes()[4096:4105]), "a 16-byte Put let the peer write the whole buffer")
}

// 8. Crafted frames: every one must end in an error reply or a closed
// connection, never a panic, an fd leak or harm to other peers.
func TestIPCRegressCraftedFrames(t *testing.T) {
	e := newEngine(t, Config{Emulator: EmulatorConfig{DRAMSize: 256 << 20}})
	l, err := e.Listen("unix", filepath.Join(t.TempDir(), "e.sock"))
	require.NoError(t, err)
	dev, _ := e.Alloc(1<<20, Gaudi(0))
	dk, _ := dev.Export()
	host, _ := e.Alloc(1<<20, Host)
	hk, _ := host.Export()
	mem, _ := ipc.NewShared(4096, "x")
	defer mem.Close()
	fdsBefore := len(openFDs())
	type step struct {
		name string
		do   func(p *rawPeer) error
	}
	gaudiLocal := dk.k
	steps := []step{
		{"hello twice", func(p *rawPeer) error { return p.c.Send(&p.hello) }},
		{"unsolicited import reply with fd", func(p *rawPeer) error {
			return p.c.Send(&wire.ImportReply{RequestID: 12345, AllocID: 1, Generation: 1, Kind: wire.FDMemfd, Size: 4096}, mem.FD(), testValidity(t).FD())
		}},
		{"completion unknown id", func(p *rawPeer) error { return p.c.Send(&wire.Completion{RequestID: 777}) }},
		{"import request gaudi key", func(p *rawPeer) error { return p.c.Send(&wire.ImportRequest{RequestID: 5, Key: dk.k}) }},
		{"put inline", func(p *rawPeer) error {
			return p.c.Send(&wire.Put{Request: wire.Request{RequestID: 6, Key: dk.k, Length: 16, Local: wire.Local{Kind: wire.LocalInline}}})
		}},
		{"put huge length", func(p *rawPeer) error {
			return p.c.Send(&wire.Put{Request: wire.Request{RequestID: 7, Key: hk.k, Offset: 1 << 63, Length: 1<<63 + 5, Local: wire.Local{Kind: wire.LocalInline}}})
		}},
		{"get with our own gaudi key as local", func(p *rawPeer) error {
			gaudiLocal.Owner = p.hello.EngineID
			return p.c.Send(&wire.Get{Request: wire.Request{RequestID: 8, Key: hk.k, Length: 16, Local: wire.Local{Kind: wire.LocalKey, Key: gaudiLocal}}})
		}},
		{"data frame", func(p *rawPeer) error { return p.c.Send(&wire.Data{RequestID: 9, Bytes: []byte("x")}) }},
		{"garbage bytes", func(p *rawPeer) error { return p.ic.Send([]byte("GARBAGEGARBAGEGARBAGEGARBAGE"), nil) }},
		{"garbage with fd", func(p *rawPeer) error { return p.ic.Send([]byte("GARBAGEGARBAGEGARBAGEGARBAGE"), []*fdT{mem.FD()}) }},
	}
	for _, s := range steps {
		p := dialRaw(t, l.Addr(), rawHello(uint32(os.Getpid())))
		require.NoError(t, s.do(p), s.name)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		f, err := p.c.Recv(ctx)
		cancel()
		if err == nil {
			m, _ := f.Message()
			t.Logf("%-40s -> reply %v", s.name, m)
			f.CloseFDs()
		} else {
			t.Logf("%-40s -> %v", s.name, err)
		}
		p.c.Close()
	}
	// The engine ends the crafted peers' endpoints on its own goroutines:
	// their fds close soon after, not at once.
	require.Eventually(t, func() bool { return len(openFDs()) <= fdsBefore+1 }, 5*time.Second, time.Millisecond, "fds of the crafted peers closed")
	// Still serving.
	v := newEngine(t, Config{Devices: DevicesNone})
	ep, err := v.Dial(context.Background(), "unix", l.Addr())
	require.NoError(t, err)
	src, _ := v.Alloc(4096, Host)
	require.NoError(t, ep.PutSync(context.Background(), src.All(), RemoteKey{k: hk.k}.Slice(0, 4096)))
}

type fdT = fdpkg.FD

func openFDs() []string {
	ents, _ := os.ReadDir("/proc/self/fd")
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// 9. Engine.Close does not wait for the serve goroutines of an endpoint
// that already failed (fail removed it from e.endpoints; only
// Endpoint.Close waits ep.serving).
func TestIPCRegressServeOutlivesClose(t *testing.T) {
	e, err := New(Config{Devices: DevicesNone})
	require.NoError(t, err)
	l, err := e.Listen("unix", filepath.Join(t.TempDir(), "e.sock"))
	require.NoError(t, err)
	host, _ := e.Alloc(1<<20, Host)
	hk, _ := host.Export()
	hook := func() { time.Sleep(300 * time.Millisecond) }
	e.cp.HookProcess.Store(&hook)
	p := dialRaw(t, l.Addr(), rawHello(uint32(os.Getpid())))
	mem, _ := ipc.NewShared(1<<20, "x")
	defer mem.Close()
	local := wire.RemoteKey{Owner: p.hello.EngineID, AllocID: 1, Generation: 1, MemType: wire.MemHost, Device: -1,
		Flags: wire.KeyRead | wire.KeyWrite, Length: 1 << 20, GrantLen: 1 << 20, Len: 1 << 20}
	require.NoError(t, p.c.Send(&wire.Put{Request: wire.Request{RequestID: 1, Key: hk.k, Length: 1 << 20,
		Local: wire.Local{Kind: wire.LocalKey, Key: local}}}))
	_, m := p.recv(t)
	ir := m.(*wire.ImportRequest)
	require.NoError(t, p.c.Send(&wire.ImportReply{RequestID: ir.RequestID, AllocID: 1, Generation: 1, Kind: wire.FDMemfd, Size: 1 << 20}, mem.FD(), testValidity(t).FD()))
	time.Sleep(50 * time.Millisecond) // the copy is in the host worker
	p.c.Close()                       // the peer goes away: the endpoint fails
	require.Eventually(t, func() bool { e.epMu.Lock(); defer e.epMu.Unlock(); return len(e.endpoints) == 0 }, time.Second, time.Millisecond)
	require.NoError(t, e.Close())
	buf := make([]byte, 1<<20)
	n := runtime.Stack(buf, true)
	alive := bytes.Contains(buf[:n], []byte("serveRequest")) || bytes.Contains(buf[:n], []byte("(*Endpoint).serve.func1"))
	t.Logf("serve goroutine alive after Engine.Close returned: %v", alive)
	time.Sleep(500 * time.Millisecond)
	require.False(t, alive, "an engine goroutine outlived Close")
}

// 10. Both engines serve each other's Gaudi requests at once (imports in
// both directions, bounce buffers, invalidations).
func TestIPCRegressMutualStress(t *testing.T) {
	ctx := context.Background()
	var engs [2]*Engine
	var paths [2]string
	var keys [2]RemoteKey
	for i := range engs {
		engs[i] = newEngine(t, Config{Emulator: EmulatorConfig{DRAMSize: 256 << 20}})
		l, err := engs[i].Listen("unix", filepath.Join(t.TempDir(), "s.sock"))
		require.NoError(t, err)
		paths[i] = l.Addr()
		d, _ := engs[i].Alloc(8<<20, Gaudi(0))
		keys[i], _ = d.Export()
	}
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	t0 := time.Now()
	for i := range engs {
		ep, err := engs[i].Dial(ctx, "unix", paths[1-i])
		require.NoError(t, err)
		for g := 0; g < 16; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				loc := Host
				if g%2 == 0 {
					loc = Gaudi(0)
				}
				b, err := engs[i].Alloc(64<<10, loc)
				if err != nil {
					errs <- err
					return
				}
				defer b.Free()
				for k := 0; k < 20; k++ {
					rk := keys[1-i].Slice(g*(64<<10), 64<<10)
					if k%2 == 0 {
						err = ep.PutSync(ctx, b.All(), rk, Timeout(20*time.Second))
					} else {
						err = ep.GetSync(ctx, b.All(), rk, Timeout(20*time.Second))
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("640 cross requests in %v; caches: %+v / %+v", time.Since(t0), engs[0].shm().CacheStats(), engs[1].shm().CacheStats())
}

// 11. A connection that never sends Hello delays Engine.Close by the
// handshake timeout (Listener.Close waits for handshakes in progress).
func TestIPCRegressHalfOpenDelaysClose(t *testing.T) {
	e, err := New(Config{Devices: DevicesNone})
	require.NoError(t, err)
	l, err := e.Listen("unix", filepath.Join(t.TempDir(), "e.sock"))
	require.NoError(t, err)
	ic, err := ipc.Dial(context.Background(), l.Addr(), ipc.Config{})
	require.NoError(t, err)
	defer ic.Close()
	time.Sleep(50 * time.Millisecond)
	t0 := time.Now()
	require.NoError(t, e.Close())
	t.Logf("Engine.Close took %v", time.Since(t0))
}

// 12. Error kinds differ between the host-key and Gaudi-key paths for the
// same refusal by the owner.
func TestIPCRegressErrorKinds(t *testing.T) {
	ctx := context.Background()
	owner := newEngine(t, Config{Emulator: EmulatorConfig{DRAMSize: 256 << 20}})
	l, err := owner.Listen("unix", filepath.Join(t.TempDir(), "o.sock"))
	require.NoError(t, err)
	hb, _ := owner.Alloc(8192, Host)
	db, _ := owner.Alloc(8192, Gaudi(0))
	hk, _ := hb.Export()
	dk, _ := db.Export()
	user := newEngine(t, Config{Devices: DevicesNone})
	ep, err := user.Dial(ctx, "unix", l.Addr())
	require.NoError(t, err)
	src, _ := user.Alloc(4096, Host)
	for _, k := range []RemoteKey{hk, dk} {
		forged := k
		forged.k.Base += 4096
		err := ep.PutSync(ctx, src.All(), forged.Slice(0, 4096))
		t.Logf("%-5v forged key: ErrInvalid=%v ErrPeer=%v: %v", k.Location(), errors.Is(err, ErrInvalid), errors.Is(err, ErrPeer), err)
	}
	require.NoError(t, hb.Free())
	err = ep.PutSync(ctx, src.All(), hk.Slice(0, 4096))
	t.Logf("freed host key: %v", err)
	ep.Close()
	err = ep.PutSync(ctx, src.All(), hk.Slice(0, 4096))
	t.Logf("closed endpoint: ErrClosed=%v %v", errors.Is(err, ErrClosed), err)
}
