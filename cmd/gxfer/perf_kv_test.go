package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestKVMsgRoundTrip(t *testing.T) {
	for _, m := range []kvMsg{
		{kind: kvHello, p: kvParams{seed: 1, window: 4, blocks: 64, bsize: 64 << 10}, unix: "/tmp/i.sock", tcp: "10.0.0.1:9"},
		{kind: kvReq, p: kvParams{seed: ^uint64(0), window: 1, blocks: 1, bsize: 8}, r: 1 << 40, at: -5, section: "gaudi", base: 1 << 33},
		{kind: kvEnd, p: kvParams{window: 1, blocks: 1, bsize: 8}, r: 3},
		{kind: kvAck, p: kvParams{window: 16, blocks: 65536, bsize: 64 << 20}, r: 7, at: 1}, // the largest -O x -blocks and -block-size
	} {
		got, err := decodeKVMsg(m.encode())
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
	for _, b := range [][]byte{nil, []byte("gxKV"), kvMsg{kind: 9, p: kvParams{window: 1, blocks: 1, bsize: 8}}.encode(),
		kvMsg{kind: kvReq, p: kvParams{window: 0, blocks: 1, bsize: 8}}.encode(),
		kvMsg{kind: kvReq, p: kvParams{window: 1, blocks: 1, bsize: 12}}.encode(),
		append(kvMsg{kind: kvReq, p: kvParams{window: 1, blocks: 1, bsize: 8}}.encode(), 0),
		// Beyond what checkAgent accepts (a peer's parameters).
		kvMsg{kind: kvReq, p: kvParams{window: 1025, blocks: 1, bsize: 8}}.encode(),
		kvMsg{kind: kvReq, p: kvParams{window: 1, blocks: 1<<16 + 1, bsize: 8}}.encode(),
		kvMsg{kind: kvReq, p: kvParams{window: 17, blocks: 1 << 16, bsize: 8}}.encode(),
		kvMsg{kind: kvReq, p: kvParams{window: 1, blocks: 1, bsize: 64<<20 + 8}}.encode()} {
		_, err := decodeKVMsg(b)
		require.ErrorIs(t, err, errKVMsg)
	}
}

// FuzzDecodeKVMsg: workload messages come from peers: any bytes decode or
// fail cleanly, and what decodes re-encodes to the same message.
func FuzzDecodeKVMsg(f *testing.F) {
	f.Add(kvMsg{kind: kvReq, p: kvParams{seed: 3, window: 2, blocks: 8, bsize: 4096}, r: 9, section: "host", base: 4096}.encode())
	f.Add(kvMsg{kind: kvHello, p: kvParams{window: 1, blocks: 1, bsize: 8}, unix: "/x"}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeKVMsg(b)
		if err != nil {
			return
		}
		m2, err := decodeKVMsg(m.encode())
		if err != nil || m2 != m {
			t.Fatalf("re-encoding %+v: %+v, %v", m, m2, err)
		}
	})
}
