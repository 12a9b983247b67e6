package agent

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/agent/etcdmeta/etcdtest"
	"github.com/gxfer/gxfer/agent/meta"
	"github.com/gxfer/gxfer/engine"
)

// TestConnectSideChannel: an agent is found by address; its record and
// sections come over its own endpoint, and the connection kept is the
// unix socket when the peer has one on this node, whatever address was
// given.
func TestConnectSideChannel(t *testing.T) {
	ctx := testCtx(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{unix: true})
	b := newAgent(t, eb, "b", agentOpts{unix: true, tcp: true})
	c := newAgent(t, eb, "c", agentOpts{tcp: true})
	buf := alloc(t, eb, 1<<20, engine.Host)
	require.NoError(t, b.Publish("kv", buf.Slice(4096, 8192)))
	require.NoError(t, b.Publish("all", buf.All()))

	tests := []struct {
		name, addr, want string
		transport        engine.TransportKind
	}{
		{"unix", b.Metadata().Unix, "b", engine.TransportIPC},
		{"tcp address, peer on this node", b.Metadata().TCP, "b", engine.TransportIPC},
		{"tcp only", c.Metadata().TCP, "c", engine.TransportTCP},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name, err := a.Connect(ctx, tt.addr)
			require.NoError(t, err)
			require.Equal(t, tt.want, name)
			p, err := a.Peer(ctx, name)
			require.NoError(t, err)
			_, err = p.Endpoint(ctx)
			require.NoError(t, err)
			tr, ok := p.Transport()
			require.True(t, ok)
			require.Equal(t, tt.transport, tr)
		})
	}
	p, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, b.Incarnation(), p.Incarnation())
	require.Equal(t, b.Metadata(), p.Metadata())
	s, err := p.Section("kv")
	require.NoError(t, err)
	require.Equal(t, uint64(8192), s.Len)
	require.Equal(t, "host", s.Location)
	_, err = p.Section("nope")
	require.ErrorIs(t, err, ErrNoSection)
	require.ErrorIs(t, err, meta.ErrNotFound)

	_, err = a.Peer(ctx, "unknown")
	require.ErrorIs(t, err, meta.ErrNotFound)
	st := a.Stats()
	require.GreaterOrEqual(t, st.CacheHits, uint64(2))
	require.Equal(t, uint64(3), st.SideFetches)
}

// TestConcurrentFirstUse: concurrent first transfers to a peer share one
// dial (the record was found in the store, with no connection; the peer
// is on this node, so the connection is dialed to its socket on first
// use).
func TestConcurrentFirstUse(t *testing.T) {
	ctx := testCtx(t)
	srv := etcdtest.New(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{store: openStore(t, srv.Endpoints())})
	b := newAgent(t, eb, "b", agentOpts{unix: true, tcp: true, store: openStore(t, srv.Endpoints())})
	dst := alloc(t, eb, 64<<10, engine.Host)
	require.NoError(t, b.Publish("dst", dst.All()))
	src := alloc(t, ea, 64<<10, engine.Host)
	copy(src.Bytes(), pattern(64<<10, 3))
	_, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, 0, a.Stats().Outbound)
	dials := a.Stats().Dials
	xs := make([]*Xfer, 16)
	var wg sync.WaitGroup
	for i := range xs {
		wg.Go(func() {
			xs[i] = a.Write(ctx, "b", []Desc{{Local: src.Slice(i*4096, 4096), Section: "dst", Off: i * 4096}})
		})
	}
	wg.Wait()
	for _, x := range xs {
		require.NoError(t, x.Wait(ctx))
	}
	st := a.Stats()
	require.Equal(t, dials+1, st.Dials, "one dial for 16 first uses")
	require.Equal(t, 1, st.Outbound)
	p, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	tr, _ := p.Transport()
	require.Equal(t, engine.TransportIPC, tr)
	require.Equal(t, dst.Bytes(), src.Bytes())
}

// layout is a scattered descriptor list: block i of local goes to
// remote block perm[i], with gaps (no two neighbours coalesce) except
// blocks 4 and 5, adjacent on both sides.
func layout(n, bs int) (loff, roff []int) {
	for i := range n {
		loff = append(loff, i*bs)
		roff = append(roff, ((i*7)%n)*2*bs)
	}
	roff[5] = roff[4] + bs
	for i := range n {
		if i != 5 && roff[i] == roff[5] {
			roff[i] = (2*n + 1) * bs
		}
	}
	return loff, roff
}

// TestWriteReadMemoryPairs writes and reads descriptor lists between host
// and Gaudi memory on both sides, over unix and TCP, byte for byte.
func TestWriteReadMemoryPairs(t *testing.T) {
	const n, bs = 12, 16 << 10
	locs := []engine.Location{engine.Host, engine.Gaudi(0)}
	for _, network := range []string{"unix", "tcp"} {
		for _, lloc := range locs {
			for _, rloc := range locs {
				t.Run(fmt.Sprintf("%s/%s-to-%s", network, lloc, rloc), func(t *testing.T) {
					ctx := testCtx(t)
					ea, eb := newEngine(t), newEngine(t)
					a := newAgent(t, ea, "a", agentOpts{})
					b := newAgent(t, eb, "b", agentOpts{unix: network == "unix", tcp: network == "tcp"})
					rbuf := alloc(t, eb, 2*(2*n+2)*bs, rloc)
					require.NoError(t, b.Publish("sec", rbuf.Slice(bs, (2*n+2)*bs)))
					addr := b.Metadata().Unix + b.Metadata().TCP
					_, err := a.Connect(ctx, addr)
					require.NoError(t, err)

					src, dst := alloc(t, ea, n*bs, lloc), alloc(t, ea, n*bs, lloc)
					data := pattern(n*bs, 1)
					setBytes(t, ea, src, 0, data)
					loff, roff := layout(n, bs)
					descs := make([]Desc, n)
					back := make([]Desc, n)
					for i := range n {
						descs[i] = Desc{Local: src.Slice(loff[i], bs), Section: "sec", Off: roff[i]}
						back[i] = Desc{Local: dst.Slice(loff[i], bs), Section: "sec", Off: roff[i], Len: bs}
					}
					x := a.Write(ctx, "b", descs)
					require.NoError(t, x.Wait(ctx))
					require.Equal(t, make([]error, n), x.Status())
					for i := range n {
						require.Equal(t, data[loff[i]:loff[i]+bs], getBytes(t, eb, rbuf, bs+roff[i], bs), "block %d", i)
					}
					x = a.Read(ctx, "b", back)
					require.NoError(t, x.Wait(ctx))
					require.Equal(t, data, getBytes(t, ea, dst, 0, n*bs))
					st := a.Stats()
					require.Equal(t, uint64(2*(n-1)), st.Puts+st.Gets, "blocks 4 and 5 coalesced")
					require.Equal(t, uint64(2*n*bs), st.Bytes)
				})
			}
		}
	}
}

// TestCoalescing counts the Puts the endpoint saw.
func TestCoalescing(t *testing.T) {
	ctx := testCtx(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{})
	b := newAgent(t, eb, "b", agentOpts{tcp: true})
	rbuf := alloc(t, eb, 1<<20, engine.Host)
	require.NoError(t, b.Publish("s", rbuf.All()))
	require.NoError(t, b.Publish("t", rbuf.Slice(0, 1<<19)))
	_, err := a.Connect(ctx, b.Metadata().TCP)
	require.NoError(t, err)
	p, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	ep, err := p.Endpoint(ctx)
	require.NoError(t, err)
	src := alloc(t, ea, 1<<20, engine.Host)
	src2 := alloc(t, ea, 1<<20, engine.Host)
	blocks := func(buf *engine.Buffer, sec string, lo, ro []int) []Desc {
		var d []Desc
		for i := range lo {
			d = append(d, Desc{Local: buf.Slice(lo[i], 4096), Section: sec, Off: ro[i]})
		}
		return d
	}
	tests := []struct {
		name  string
		descs []Desc
		puts  uint64
	}{
		{"adjacent both sides", blocks(src, "s", []int{0, 4096, 8192, 12288}, []int{0, 4096, 8192, 12288}), 1},
		{"adjacent locally only", blocks(src, "s", []int{0, 4096}, []int{0, 8192}), 2},
		{"adjacent remotely only", blocks(src, "s", []int{0, 8192}, []int{0, 4096}), 2},
		{"two runs", blocks(src, "s", []int{0, 4096, 65536, 69632}, []int{0, 4096, 65536, 69632}), 2},
		{"other section", append(blocks(src, "s", []int{0}, []int{0}), blocks(src, "t", []int{4096}, []int{4096})...), 2},
		{"other buffer", append(blocks(src, "s", []int{0}, []int{0}), blocks(src2, "s", []int{4096}, []int{4096})...), 2},
		{"backwards", blocks(src, "s", []int{4096, 0}, []int{4096, 0}), 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := ep.Stats().Puts
			require.NoError(t, a.Write(ctx, "b", tt.descs).Wait(ctx))
			require.Equal(t, tt.puts, ep.Stats().Puts-before)
		})
	}
}

// TestInvalidDescriptors: every descriptor is checked before anything is
// submitted; the error names the index.
func TestInvalidDescriptors(t *testing.T) {
	ctx := testCtx(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{})
	b := newAgent(t, eb, "b", agentOpts{tcp: true})
	rbuf := alloc(t, eb, 1<<20, engine.Host)
	require.NoError(t, b.Publish("s", rbuf.Slice(0, 65536)))
	_, err := a.Connect(ctx, b.Metadata().TCP)
	require.NoError(t, err)
	src := alloc(t, ea, 1<<20, engine.Host)
	ok := Desc{Local: src.Slice(0, 4096), Section: "s"}
	tests := []struct {
		name string
		bad  Desc
		want error
	}{
		{"no such section", Desc{Local: src.Slice(0, 4096), Section: "x"}, ErrNoSection},
		{"negative offset", Desc{Local: src.Slice(0, 4096), Section: "s", Off: -1}, engine.ErrInvalid},
		{"past the section", Desc{Local: src.Slice(0, 4096), Section: "s", Off: 65536 - 4095}, engine.ErrInvalid},
		{"offset past the section", Desc{Local: src.Slice(0, 4096), Section: "s", Off: 1 << 40}, engine.ErrInvalid},
		{"length mismatch", Desc{Local: src.Slice(0, 4096), Section: "s", Len: 4095}, engine.ErrInvalid},
		{"bad local slice", Desc{Local: src.Slice(1<<20-1, 2), Section: "s"}, engine.ErrInvalid},
		{"no local slice", Desc{Section: "s"}, engine.ErrInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			puts := a.Stats().Puts
			x := a.Write(ctx, "b", []Desc{ok, ok, tt.bad, ok})
			err := x.Wait(ctx)
			require.ErrorIs(t, err, tt.want)
			var de *DescError
			require.ErrorAs(t, err, &de)
			require.Equal(t, 2, de.Index)
			st := x.Status()
			require.Len(t, st, 4)
			require.ErrorIs(t, st[0], ErrNotSubmitted)
			require.ErrorIs(t, st[2], tt.want)
			require.Equal(t, puts, a.Stats().Puts, "nothing submitted")
		})
	}
	require.ErrorIs(t, a.Write(ctx, "b", nil).Wait(ctx), engine.ErrInvalid)
	require.ErrorIs(t, a.Write(ctx, "b", []Desc{ok}, WithNotify(make([]byte, MaxNotify+1))).Wait(ctx), engine.ErrInvalid)
	require.ErrorIs(t, a.Write(ctx, "nobody", []Desc{ok}).Wait(ctx), meta.ErrNotFound)
	require.GreaterOrEqual(t, a.Stats().Errors.Invalid, uint64(len(tests)))
}

// TestPrepared posts subsets of prepared lists by index.
func TestPrepared(t *testing.T) {
	const n, bs = 16, 4096
	ctx := testCtx(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{})
	b := newAgent(t, eb, "b", agentOpts{unix: true})
	rbuf := alloc(t, eb, 4*n*bs, engine.Gaudi(0))
	require.NoError(t, b.Publish("kv", rbuf.All()))
	_, err := a.Connect(ctx, b.Metadata().Unix)
	require.NoError(t, err)
	src := alloc(t, ea, n*bs, engine.Host)
	data := pattern(n*bs, 2)
	copy(src.Bytes(), data)
	local := make([]engine.Slice, n)
	remote := make([]RemoteDesc, n)
	for i := range n {
		local[i] = src.Slice(i*bs, bs)
		// Pairs (2k, 2k+1) adjacent remotely, groups apart.
		remote[i] = RemoteDesc{Section: "kv", Off: (i/2)*4*bs + (i%2)*bs}
	}
	px, err := a.Prepare(ctx, "b", local, remote)
	require.NoError(t, err)
	require.Equal(t, n, px.Len())

	tests := []struct {
		name string
		idx  []int
		puts uint64
	}{
		{"one", []int{3}, 1},
		{"adjacent pair", []int{6, 7}, 1},
		{"pair backwards", []int{7, 6}, 2},
		{"across groups", []int{7, 8}, 2},
		{"scattered", []int{15, 0, 9, 4, 5}, 4},
		{"more runs than the first list", []int{0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7}, 12},
		{"all", nil, n / 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setBytes(t, eb, rbuf, 0, make([]byte, 4*n*bs))
			puts := a.Stats().Puts
			x := px.Write(ctx, tt.idx)
			require.NoError(t, x.Wait(ctx))
			require.Equal(t, tt.puts, a.Stats().Puts-puts)
			idx := tt.idx
			if idx == nil {
				for i := range n {
					idx = append(idx, i)
				}
			}
			require.Len(t, x.Status(), len(idx))
			for _, i := range idx {
				require.Equal(t, data[i*bs:(i+1)*bs], getBytes(t, eb, rbuf, remote[i].Off, bs), "descriptor %d", i)
			}
		})
	}
	// Read back a subset.
	clear(src.Bytes())
	require.NoError(t, px.Read(ctx, []int{2, 3, 11}).Wait(ctx))
	for _, i := range []int{2, 3, 11} {
		require.Equal(t, data[i*bs:(i+1)*bs], src.Bytes()[i*bs:(i+1)*bs])
	}
	x := px.Write(ctx, []int{1, n})
	var de *DescError
	require.ErrorAs(t, x.Wait(ctx), &de)
	require.Equal(t, 1, de.Index)
	require.ErrorIs(t, de, engine.ErrInvalid)
	// A bad index past the first list's runs refuses the post too, before
	// anything moves (the first list is issued before the rest is planned,
	// but every index is checked first).
	setBytes(t, eb, rbuf, 0, make([]byte, 4*n*bs))
	x = px.Write(ctx, []int{0, 2, 4, 6, 8, 10, 12, 14, 1, 3, -1})
	require.ErrorAs(t, x.Wait(ctx), &de)
	require.Equal(t, 10, de.Index)
	require.Equal(t, make([]byte, bs), getBytes(t, eb, rbuf, remote[0].Off, bs), "nothing moved")

	_, err = a.Prepare(ctx, "b", local[:1], []RemoteDesc{{Section: "kv", Off: 4 * n * bs}})
	require.ErrorIs(t, err, engine.ErrInvalid)
	_, err = a.Prepare(ctx, "b", local[:2], remote[:1])
	require.ErrorIs(t, err, engine.ErrInvalid)
}

// TestNotifyAfterData: the target checks the bytes of each transfer when
// its notification arrives, thousands of times, on unix and TCP.
func TestNotifyAfterData(t *testing.T) {
	const rounds, bs, window = 2000, 2048, 16
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			ctx := testCtx(t)
			ea, eb := newEngine(t), newEngine(t)
			a := newAgent(t, ea, "a", agentOpts{})
			b := newAgent(t, eb, "b", agentOpts{unix: network == "unix", tcp: network == "tcp"})
			rbuf := alloc(t, eb, rounds*bs, engine.Host)
			require.NoError(t, b.Publish("in", rbuf.All()))
			_, err := a.Connect(ctx, b.Metadata().Unix+b.Metadata().TCP)
			require.NoError(t, err)
			src := alloc(t, ea, rounds*bs, engine.Host)
			for i := range rounds {
				copy(src.Bytes()[i*bs:], pattern(bs, uint64(i)))
			}
			// Transfers run concurrently (a window of them), so their
			// notifications come in completion order: the target checks
			// the bytes of the round each one names.
			checked := make(chan error, 1)
			go func() {
				seen := make([]bool, rounds)
				for range rounds {
					n, err := b.Recv(ctx)
					if err != nil {
						checked <- err
						return
					}
					var i int
					if _, err := fmt.Sscan(string(n.Msg), &i); err != nil || i < 0 || i >= rounds || seen[i] ||
						n.From != "a" || n.Incarnation != a.Incarnation() {
						checked <- fmt.Errorf("bad notification %+v", n)
						return
					}
					seen[i] = true
					if !bytes.Equal(rbuf.Bytes()[i*bs:(i+1)*bs], pattern(bs, uint64(i))) {
						checked <- fmt.Errorf("round %d: notified before its data", i)
						return
					}
				}
				checked <- nil
			}()
			xs := make([]*Xfer, 0, window)
			for i := range rounds {
				if len(xs) == window {
					require.NoError(t, xs[0].Wait(ctx))
					xs = xs[1:]
				}
				xs = append(xs, a.Write(ctx, "b", []Desc{{Local: src.Slice(i*bs, bs), Section: "in", Off: i * bs}},
					WithNotify([]byte(fmt.Sprint(i)))))
			}
			for _, x := range xs {
				require.NoError(t, x.Wait(ctx))
			}
			require.NoError(t, <-checked)
			require.Equal(t, uint64(rounds), a.Stats().NotifySent)
			require.Equal(t, uint64(rounds), b.Stats().NotifyRecv)
		})
	}
}

// TestNotifyBackPressure: with a small queue and no Recv, senders block
// (a lone sender at its share, half the queue: waitShare); nothing is
// lost and order holds.
func TestNotifyBackPressure(t *testing.T) {
	const total = 3000
	ctx := testCtx(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{})
	b := newAgent(t, eb, "b", agentOpts{unix: true, queue: 4})
	_, err := a.Connect(ctx, b.Metadata().Unix)
	require.NoError(t, err)
	sent := make(chan error, 1)
	go notifyCount(ctx, a, "b", total, sent)
	// The sender's share of the queue fills, then the engine's window:
	// the sender cannot have finished while nothing is taken.
	require.Eventually(t, func() bool { return b.Stats().NotifyQueued == 2 }, time.Minute, time.Millisecond)
	select {
	case err := <-sent:
		t.Fatalf("the sender finished (%v) while the receiver took nothing", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.Less(t, a.Stats().NotifySent, uint64(total))
	for i := range total {
		n, err := b.Recv(ctx)
		require.NoError(t, err)
		require.Equal(t, fmt.Sprint(i), string(n.Msg))
	}
	require.NoError(t, <-sent)
}

// TestNotifyOrderManySenders: three peers send at once to one agent
// whose queue is small, and its Recv sometimes pauses: notifications come
// both from the queue and straight from the peers' endpoints (Recv's
// polling), and each peer's arrive in order, every one once.
func TestNotifyOrderManySenders(t *testing.T) {
	const senders, each = 3, 3000
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			ctx := testCtx(t)
			eb := newEngine(t)
			b := newAgent(t, eb, "b", agentOpts{unix: network == "unix", tcp: network == "tcp", queue: 8})
			sent := make(chan error, senders)
			for s := range senders {
				a := newAgent(t, newEngine(t), fmt.Sprint("s", s), agentOpts{})
				_, err := a.Connect(ctx, b.Metadata().Unix+b.Metadata().TCP)
				require.NoError(t, err)
				go notifyCount(ctx, a, "b", each, sent)
			}
			next := map[string]int{}
			for k := range senders * each {
				if k%500 == 0 {
					time.Sleep(2 * time.Millisecond) // the queue fills meanwhile
				}
				n, err := b.Recv(ctx)
				require.NoError(t, err)
				require.Equal(t, fmt.Sprint(next[n.From]), string(n.Msg), "from %s", n.From)
				next[n.From]++
				// Stats never counts fewer than Recv returned.
				require.GreaterOrEqual(t, b.Stats().NotifyRecv, uint64(k+1))
			}
			for range senders {
				require.NoError(t, <-sent)
			}
			for s := range senders {
				require.Equal(t, each, next[fmt.Sprint("s", s)])
			}
			require.Equal(t, uint64(senders*each), b.Stats().NotifyRecv)
			require.Zero(t, b.Stats().NotifyQueued)
		})
	}
}

// TestWithdraw: after Withdraw the peer's next transfer to the section
// fails; re-resolution brings the new record, and other sections work.
func TestWithdraw(t *testing.T) {
	ctx := testCtx(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{})
	b := newAgent(t, eb, "b", agentOpts{unix: true})
	rbuf := alloc(t, eb, 1<<20, engine.Host)
	require.NoError(t, b.Publish("x", rbuf.Slice(0, 4096)))
	require.NoError(t, b.Publish("y", rbuf.Slice(4096, 4096)))
	_, err := a.Connect(ctx, b.Metadata().Unix)
	require.NoError(t, err)
	src := alloc(t, ea, 4096, engine.Host)
	require.NoError(t, a.Write(ctx, "b", []Desc{{Local: src.All(), Section: "x"}}).Wait(ctx))
	old, err := a.Peer(ctx, "b")
	require.NoError(t, err)

	require.NoError(t, b.Withdraw("x"))
	<-old.Done() // Withdraw returned: a has dropped it
	require.ErrorIs(t, old.Err(), engine.ErrPeer)
	require.ErrorIs(t, b.Withdraw("x"), ErrNoSection)

	err = a.Write(ctx, "b", []Desc{{Local: src.All(), Section: "x"}}).Wait(ctx)
	require.ErrorIs(t, err, ErrNoSection)
	require.NoError(t, a.Write(ctx, "b", []Desc{{Local: src.All(), Section: "y"}}).Wait(ctx))
	p, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	require.NotSame(t, old, p)
	require.Equal(t, b.Metadata().Version, p.Metadata().Version)
	// The dropped peer stays dead, naming itself.
	err = old.Write(ctx, []Desc{{Local: src.All(), Section: "y"}}).Wait(ctx)
	require.ErrorIs(t, err, engine.ErrPeer)
	require.Contains(t, err.Error(), `"b"`)
}

// TestPeerClosedInFlight: a transfer in flight when the peer agent closes
// fails with ErrPeer naming it; the agent restarted under the same name
// is a new incarnation and is served as such.
func TestPeerClosedInFlight(t *testing.T) {
	ctx := testCtx(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{})
	dir := sockDir(t)
	b, err := New(ctx, Config{Name: "b", Engine: eb, Unix: dir + "/b.sock"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = b.Close() })
	rbuf := alloc(t, eb, 1<<20, engine.Host)
	require.NoError(t, b.Publish("g", rbuf.All()))
	_, err = a.Connect(ctx, b.Metadata().Unix)
	require.NoError(t, err)
	src := alloc(t, ea, 1<<20, engine.Gaudi(0))
	// The DMA out of the local Gaudi memory is held: the Put stays in
	// flight while b closes.
	em, err := ea.Emulator(0)
	require.NoError(t, err)
	em.DelayNextCS(1, 3*time.Second)
	bytes0 := a.Stats().Bytes
	x := a.Write(ctx, "b", []Desc{{Local: src.All(), Section: "g"}})
	select {
	case <-x.Done():
		t.Fatalf("transfer done before the peer closed: %v", x.Err())
	default:
	}
	require.NoError(t, b.Close())
	err = x.Wait(ctx)
	require.ErrorIs(t, err, engine.ErrPeer)
	var pe *PeerError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "b", pe.Name)
	require.Equal(t, b.Incarnation(), pe.Incarnation)
	require.Equal(t, bytes0, a.Stats().Bytes, "a failed transfer's bytes are not counted")

	b2 := newAgent(t, eb, "b", agentOpts{unix: true, dir: dir})
	require.NotEqual(t, b.Incarnation(), b2.Incarnation())
	require.NoError(t, b2.Publish("g", rbuf.All()))
	require.NoError(t, a.Write(ctx, "b", []Desc{{Local: src.All(), Section: "g"}}).Wait(ctx))
	require.Equal(t, bytes0+1<<20, a.Stats().Bytes)
	p, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, b2.Incarnation(), p.Incarnation())
}

// TestClose: Close is idempotent and everything after it fails with
// ErrClosed.
func TestClose(t *testing.T) {
	ctx := testCtx(t)
	e := newEngine(t)
	a, err := New(ctx, Config{Name: "a", Engine: e, TCP: "127.0.0.1:0"})
	require.NoError(t, err)
	require.NoError(t, a.Close())
	require.NoError(t, a.Close())
	_, err = a.Peer(ctx, "x")
	require.ErrorIs(t, err, engine.ErrClosed)
	_, err = a.Recv(ctx)
	require.ErrorIs(t, err, engine.ErrClosed)
	buf := alloc(t, e, 4096, engine.Host)
	require.ErrorIs(t, a.Publish("s", buf.All()), engine.ErrClosed)

	_, err = New(ctx, Config{Engine: e})
	require.ErrorIs(t, err, engine.ErrInvalid)
	_, err = New(ctx, Config{Name: strings.Repeat("n", 256), Engine: e})
	require.ErrorIs(t, err, engine.ErrInvalid)
	_, err = New(ctx, Config{Name: "x"})
	require.ErrorIs(t, err, engine.ErrInvalid)
}

// TestLongLists: several Xfers at once, on unix and TCP, of scattered
// descriptors: lists far longer than the requests an endpoint serves at
// once (64), into the peer's Gaudi memory (each descriptor a request the
// owner serves); and lists into its host memory whose first list holds
// overlapMin bytes or more (over unix the caller copies it while the
// Xfer's goroutine issues the rest).
func TestLongLists(t *testing.T) {
	const xfers = 4
	tests := []struct {
		name  string
		n, bs int
		loc   engine.Location
	}{
		{"gaudi", 1000, 4096, engine.Gaudi(0)},
		{"host, first list overlapped", 48, 256 << 10, engine.Host},
	}
	for _, tt := range tests {
		for _, network := range []string{"unix", "tcp"} {
			t.Run(tt.name+"/"+network, func(t *testing.T) {
				n, bs := tt.n, tt.bs
				runs := make([]run, n)
				for i := range runs {
					runs[i].bytes = bs
				}
				_, firstB := firstRuns(runs)
				require.Equal(t, tt.loc == engine.Host, firstB >= overlapMin, "the case the test means")
				ctx := testCtx(t)
				ea, eb := newEngine(t), newEngine(t)
				a := newAgent(t, ea, "a", agentOpts{})
				b := newAgent(t, eb, "b", agentOpts{unix: network == "unix", tcp: network == "tcp"})
				kv := alloc(t, eb, xfers*2*n*bs, tt.loc)
				require.NoError(t, b.Publish("kv", kv.All()))
				_, err := a.Connect(ctx, b.Metadata().Unix+b.Metadata().TCP)
				require.NoError(t, err)
				src := alloc(t, ea, xfers*n*bs, engine.Host)
				data := pattern(xfers*n*bs, 11)
				copy(src.Bytes(), data)
				xs := make([]*Xfer, xfers)
				for k := range xfers {
					descs := make([]Desc, n)
					for i := range n {
						j := (i * 7) % n // scattered in the section
						descs[i] = Desc{Local: src.Slice((k*n+i)*bs, bs), Section: "kv", Off: (k*n + j) * 2 * bs}
					}
					xs[k] = a.Write(ctx, "b", descs)
				}
				for _, x := range xs {
					require.NoError(t, x.Wait(ctx))
				}
				got := getBytes(t, eb, kv, 0, xfers*2*n*bs)
				for k := range xfers {
					for i := range n {
						j := k*n + (i*7)%n
						require.Equal(t, data[(k*n+i)*bs:(k*n+i+1)*bs], got[j*2*bs:j*2*bs+bs], "xfer %d descriptor %d", k, i)
					}
				}
			})
		}
	}
}

// mutedWatchStore is a store whose watches report nothing: watches that
// lag behind the store.
type mutedWatchStore struct{ meta.Store }

func (s mutedWatchStore) Watch(name string, _ func(meta.Event)) func() {
	return s.Store.Watch(name, func(meta.Event) {})
}

// TestStaleRecordOnDial: a record cached without a connection (found in
// the store, whose watch has not told the change yet) goes stale when the
// peer republishes; the dial's hello shows the newer Version, the record
// is dropped and looked up again within the same Write.
func TestStaleRecordOnDial(t *testing.T) {
	ctx := testCtx(t)
	srv := etcdtest.New(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{store: mutedWatchStore{openStore(t, srv.Endpoints())}})
	b := newAgent(t, eb, "b", agentOpts{unix: true, tcp: true, store: openStore(t, srv.Endpoints())})
	buf := alloc(t, eb, 1<<20, engine.Host)
	require.NoError(t, b.Publish("x", buf.Slice(0, 4096)))
	require.NoError(t, b.Publish("old", buf.Slice(4096, 4096)))
	p1, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	require.NoError(t, b.Publish("new", buf.Slice(8192, 4096)))
	require.NoError(t, b.Withdraw("x"))
	select {
	case <-p1.Done():
		t.Fatal("dropped without a connection to be told on")
	default:
	}
	src := alloc(t, ea, 4096, engine.Host)
	copy(src.Bytes(), pattern(4096, 4))
	require.NoError(t, a.Write(ctx, "b", []Desc{{Local: src.All(), Section: "old"}}).Wait(ctx))
	require.ErrorIs(t, p1.Err(), engine.ErrPeer)
	require.NoError(t, a.Write(ctx, "b", []Desc{{Local: src.All(), Section: "new"}}).Wait(ctx))
	require.ErrorIs(t, a.Write(ctx, "b", []Desc{{Local: src.All(), Section: "x"}}).Wait(ctx), ErrNoSection)
	require.Equal(t, src.Bytes(), buf.Bytes()[8192:8192+4096])
	p2, err := a.Peer(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, b.Metadata(), p2.Metadata())
}

// TestDoneThenPeer: once a dropped peer's Done is closed, asking for the
// name again never returns the dropped peer (it used to stay cached for
// a moment after Done closed, so a caller woken by Done could get it back
// with its old record).
func TestDoneThenPeer(t *testing.T) {
	ctx := testCtx(t)
	ea, eb := newEngine(t), newEngine(t)
	a := newAgent(t, ea, "a", agentOpts{})
	b := newAgent(t, eb, "b", agentOpts{unix: true})
	buf := alloc(t, eb, 4096, engine.Host)
	_, err := a.Connect(ctx, b.Metadata().Unix)
	require.NoError(t, err)
	for i := range 300 {
		old, err := a.Peer(ctx, "b")
		require.NoError(t, err)
		_, err = old.Endpoint(ctx)
		require.NoError(t, err)
		name := fmt.Sprintf("s%d", i)
		require.NoError(t, b.Publish(name, buf.All()))
		<-old.Done()
		p, err := a.Peer(ctx, "b")
		require.NoError(t, err)
		require.False(t, old == p, "round %d: the dropped peer was handed back", i)
		_, err = p.Section(name)
		require.NoError(t, err, "round %d", i)
	}
}

// notifyCount sends to the notifications "0" to n-1 in order, then its
// outcome on sent.
func notifyCount(ctx context.Context, a *Agent, to string, n int, sent chan<- error) {
	for i := range n {
		if err := a.Notify(ctx, to, []byte(fmt.Sprint(i))); err != nil {
			sent <- err
			return
		}
	}
	sent <- nil
}
