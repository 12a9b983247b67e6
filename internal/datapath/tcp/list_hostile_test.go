package tcp

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/gxerr"
	"github.com/gxfer/gxfer/wire"
)

// rawPeer is a fake endpoint (dialer: it makes the requests; else it
// owns size bytes) talking to raw frames of a test playing its peer.
func rawPeer(t *testing.T, dialer bool, size int) (*fakeCtrl, *wire.Conn) {
	t.Helper()
	ca, cb := loopback(t)
	f := fakeEnd(t, ca, dialer, size, listCaps)
	raw := wire.NewConn(wire.NewStreamTransport(cb), wire.ConnConfig{MaxFrame: 8 << 20})
	t.Cleanup(func() {
		_ = raw.Close()
		f.close()
	})
	return f, raw
}

// failsWithPeer waits for the fake endpoint to fail with a peer error.
func failsWithPeer(t *testing.T, f *fakeCtrl) {
	t.Helper()
	select {
	case <-f.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the endpoint did not fail")
	}
	require.ErrorIs(t, f.Err(), gxerr.Peer)
}

func list(id uint64, lens ...uint64) wire.ListRequest {
	r := wire.ListRequest{RequestID: id, Keys: []wire.RemoteKey{viewKey(1<<20, 0, 1<<20)}}
	var off uint64
	for _, n := range lens {
		r.Entries = append(r.Entries, wire.ListEntry{Offset: off, Length: n})
		off += n
	}
	return r
}

// TestListHostileRequester: an owner fails the endpoint with a peer error
// (never panics, never lands a byte out of place) when a requester's
// list and its stream do not match, or its frames break the limits.
func TestListHostileRequester(t *testing.T) {
	bytes := func(n int) []byte { return make([]byte, n) }
	overLimit := func() []byte { // a PutList announcing 65535 entries in 48 bytes
		h := wire.Header{Version: wire.Version, Type: wire.TypePutList, Length: 8 + 40, RequestID: 1}
		b := h.Append(nil)
		b = binary.LittleEndian.AppendUint16(b, 1)
		b = binary.LittleEndian.AppendUint16(b, 0xffff)
		return append(b, make([]byte, 44)...)
	}
	for _, tc := range []struct {
		name string
		send func(raw *wire.Conn) error
	}{
		{"data across entries, beyond the list", func(raw *wire.Conn) error {
			return raw.SendWithData([]wire.Message{&wire.PutList{ListRequest: list(1, 100, 0, 100)}}, 1, 0, bytes(201))
		}},
		{"data beyond the list", func(raw *wire.Conn) error {
			if err := raw.SendWithData([]wire.Message{&wire.PutList{ListRequest: list(1, 100)}}, 1, 0, bytes(100)); err != nil {
				return err
			}
			return raw.SendData(1, 100, bytes(1))
		}},
		{"data longer than the list", func(raw *wire.Conn) error {
			return raw.SendWithData([]wire.Message{&wire.PutList{ListRequest: list(1, 100, 10)}}, 1, 0, bytes(111))
		}},
		{"data out of order", func(raw *wire.Conn) error {
			return raw.SendWithData([]wire.Message{&wire.PutList{ListRequest: list(1, 100, 100)}}, 1, 100, bytes(100))
		}},
		{"a list of our parity", func(raw *wire.Conn) error {
			return raw.Send(&wire.GetList{ListRequest: list(2, 100)})
		}},
		{"an id in progress", func(raw *wire.Conn) error {
			if err := raw.Send(&wire.PutList{ListRequest: list(1, 100)}); err != nil {
				return err
			}
			return raw.Send(&wire.PutList{ListRequest: list(1, 100)})
		}},
		{"a cancel after other than what landed", func(raw *wire.Conn) error {
			if err := raw.SendWithData([]wire.Message{&wire.PutList{ListRequest: list(1, 100, 100)}}, 1, 0, bytes(100)); err != nil {
				return err
			}
			return raw.Send(&wire.Cancel{RequestID: 1, Sent: 50})
		}},
		{"counts over the limits", func(raw *wire.Conn) error {
			return raw.Transport().Send(overLimit(), nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			owner, raw := rawPeer(t, false, 1<<20)
			require.NoError(t, tc.send(raw))
			failsWithPeer(t, owner)
		})
	}
}

// TestListHostileOwner: a requester fails the endpoint with a peer error,
// and resolves every entry, when an owner answers a list wrongly.
func TestListHostileOwner(t *testing.T) {
	for _, tc := range []struct {
		name   string
		put    bool
		answer func(raw *wire.Conn, id uint64) error
	}{
		{"statuses for fewer entries", false, func(raw *wire.Conn, id uint64) error {
			if err := raw.SendData(id, 0, make([]byte, 200)); err != nil {
				return err
			}
			return raw.Send(&wire.ListReply{RequestID: id, Statuses: []wire.Status{wire.StatusOK}})
		}},
		{"a reply before the data", false, func(raw *wire.Conn, id uint64) error {
			return raw.Send(&wire.ListReply{RequestID: id, Statuses: []wire.Status{wire.StatusOK, wire.StatusOK}})
		}},
		{"data beyond the list", false, func(raw *wire.Conn, id uint64) error {
			return raw.SendData(id, 0, make([]byte, 201))
		}},
		{"a reply after part of the data", false, func(raw *wire.Conn, id uint64) error {
			if err := raw.SendData(id, 0, make([]byte, 150)); err != nil {
				return err
			}
			return raw.Send(&wire.ListReply{RequestID: id, Statuses: []wire.Status{wire.StatusOK, wire.StatusOK}})
		}},
		{"a Completion for a list", true, func(raw *wire.Conn, id uint64) error {
			return raw.Send(&wire.Completion{RequestID: id, Status: wire.StatusOK})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, raw := rawPeer(t, true, 0)
			local := &hostBuf{mem: make([]byte, 200)}
			reqs := []datapath.Req{
				{Put: tc.put, Local: datapath.Mem{B: local, Len: 100}, Key: viewKey(1<<20, 0, 100)},
				{Put: tc.put, Local: datapath.Mem{B: local, Off: 100, Len: 100}, Key: viewKey(1<<20, 500, 100)},
			}
			c := newListCompletion(2)
			req.path.StartList(context.Background(), reqs, c)
			f, err := raw.Recv(context.Background())
			require.NoError(t, err)
			want := map[bool]wire.Type{true: wire.TypePutList, false: wire.TypeGetList}[tc.put]
			require.Equal(t, want, f.Header.Type)
			m, err := f.Message()
			require.NoError(t, err)
			if tc.put {
				require.Len(t, m.(*wire.PutList).Entries, 2)
				f, err := raw.Recv(context.Background()) // the data
				require.NoError(t, err)
				require.Equal(t, wire.TypeData, f.Header.Type)
			}
			require.NoError(t, tc.answer(raw, f.Header.RequestID))
			failsWithPeer(t, req)
			for i, err := range c.wait(t) {
				require.ErrorIs(t, err, gxerr.Peer, "entry %d", i)
			}
		})
	}
}

// TestListSmallEntriesFrames: a PutList of small entries goes out in Data
// frames of maxBatch entries each (within Chunk bytes): 1024 entries of
// 1 KiB in 4 frames, which took 16 when a frame carried 64 pieces; and
// the requester completes every entry on the owner's reply.
func TestListSmallEntriesFrames(t *testing.T) {
	ctx := context.Background()
	req, raw := rawPeer(t, true, 0)
	const n, size = 1024, 1024
	local := &hostBuf{mem: make([]byte, n*size)}
	reqs := make([]datapath.Req, n)
	for i := range reqs {
		reqs[i] = datapath.Req{Put: true, Local: datapath.Mem{B: local, Off: uint64(i * size), Len: size}, Key: viewKey(1<<30, uint64(2*i*size), size)}
	}
	c := newListCompletion(n)
	req.path.StartList(ctx, reqs, c)
	pl := recvMsg[*wire.PutList](t, raw)
	require.Len(t, pl.Entries, n)
	frames, got := 0, 0
	for got < n*size {
		d := recvMsg[*wire.Data](t, raw)
		require.Equal(t, uint64(got), d.Offset)
		got += len(d.Bytes)
		frames++
	}
	require.Equal(t, n*size, got)
	require.Equal(t, 4, frames, "Data frames for %d entries of %d bytes", n, size)
	sts := make([]wire.Status, n)
	for i := range sts {
		sts[i] = wire.StatusOK
	}
	require.NoError(t, raw.Send(&wire.ListReply{RequestID: pl.RequestID, Statuses: sts}))
	for i, err := range c.wait(t) {
		require.NoError(t, err, "entry %d", i)
	}
}

// recvMsg receives the next frame from raw, which must be a T.
func recvMsg[T wire.Message](t *testing.T, raw *wire.Conn) T {
	t.Helper()
	f, err := raw.Recv(context.Background())
	require.NoError(t, err)
	m, err := f.Message()
	require.NoError(t, err)
	v, ok := m.(T)
	require.True(t, ok, "%T", m)
	return v
}

// TestGetListRefusedHugeEntry: a GetList whose refused entries add up to
// more than maxRefusedZeros is refused as a whole with an Error and no
// data. The owner used to stream zeros for a refused entry of any length
// the requester named (2^40 bytes here: one request holding a serving
// slot, its CPU and bandwidth for as long as the peer read).
func TestGetListRefusedHugeEntry(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lens  []uint64
		error bool
	}{
		{"one huge refused entry", []uint64{1 << 40}, true},
		{"valid entry and a huge refused one", []uint64{4096, 1 << 40}, true},
		{"small refused entry", []uint64{4096, 1 << 20}, false}, // the second goes past the 1 MiB view: zeros, then a reply
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, raw := rawPeer(t, false, 1<<20)
			require.NoError(t, raw.Send(&wire.GetList{ListRequest: list(1, tc.lens...)}))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			data := 0
			for {
				f, err := raw.Recv(ctx)
				require.NoError(t, err, "after %d data frames", data)
				switch f.Header.Type {
				case wire.TypeData:
					data++
					require.False(t, tc.error, "data for a request refused as a whole")
					continue
				case wire.TypeError:
					require.True(t, tc.error)
					require.Zero(t, data)
				case wire.TypeListReply:
					require.False(t, tc.error, "a reply after %d data frames", data)
				default:
					t.Fatalf("unexpected %v", f.Header.Type)
				}
				return
			}
		})
	}
}

// TestListDroppedBytesNeedNoBuffer: the bytes of a refused entry in a
// Data frame shared with entries that land are read into one small
// scratch buffer, however many they are. The reader used to allocate (and
// keep, for the connection's life) a buffer as large as the refused part
// of the frame: up to wire.MaxDataPayload per connection, for any peer.
func TestListDroppedBytesNeedNoBuffer(t *testing.T) {
	owner, raw := rawPeer(t, false, 1<<20)
	refused := viewKey(1<<30, 0, 1<<30)
	refused.AllocID = badAlloc
	r := wire.ListRequest{RequestID: 1, Keys: []wire.RemoteKey{refused, viewKey(1<<20, 0, 1<<20)},
		Entries: []wire.ListEntry{{Key: 0, Length: wire.MaxDataPayload - 8}, {Key: 1, Length: 8}}}
	payload := make([]byte, wire.MaxDataPayload)
	copy(payload[wire.MaxDataPayload-8:], "landed!!")
	require.NoError(t, raw.SendWithData([]wire.Message{&wire.PutList{ListRequest: r}}, 1, 0, payload))
	rep := recvMsg[*wire.ListReply](t, raw)
	require.Equal(t, []wire.Status{wire.StatusBadKey, wire.StatusOK}, rep.Statuses)
	owner.close() // (the reader has exited: its scratch buffer is ours to read)
	require.Equal(t, "landed!!", string(owner.env.mem.mem[:8]))
	require.LessOrEqual(t, cap(owner.path.drop), scratchMax)
}
