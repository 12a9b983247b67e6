package wire

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRDMAConnectValidation(t *testing.T) {
	good := RDMAConnect{QPN: 0x11, PSN: 0x22, MTU: 3, NIC: 1, NICs: 2, GID: [16]byte{0xfe, 0x80}}
	frame, err := AppendFrame(nil, &good)
	require.NoError(t, err)
	require.Len(t, frame, HeaderSize+RDMAConnectSize)
	_, m, err := Decode(frame, 0)
	require.NoError(t, err)
	require.Equal(t, &good, m)

	for name, bad := range map[string]RDMAConnect{
		"zero QPN":      {QPN: 0, MTU: 3, LID: 1, NICs: 1},
		"QPN > 24 bits": {QPN: 1 << 24, MTU: 3, LID: 1, NICs: 1},
		"PSN > 24 bits": {QPN: 1, PSN: 1 << 24, MTU: 3, LID: 1, NICs: 1},
		"MTU 0":         {QPN: 1, MTU: 0, LID: 1, NICs: 1},
		"MTU 6":         {QPN: 1, MTU: 6, LID: 1, NICs: 1},
		"no address":    {QPN: 1, MTU: 3, NICs: 1},
		"no NICs":       {QPN: 1, MTU: 3, LID: 1},
		"NICs > max":    {QPN: 1, MTU: 3, LID: 1, NICs: MaxNICs + 1},
		"NIC >= NICs":   {QPN: 1, MTU: 3, LID: 1, NIC: 2, NICs: 2},
	} {
		_, err := AppendFrame(nil, &bad)
		require.ErrorIs(t, err, ErrInvalid, name)
		// The same fields sent by a peer are refused when decoded.
		p := binary.LittleEndian.AppendUint32(nil, bad.QPN)
		p = binary.LittleEndian.AppendUint32(p, bad.PSN)
		p = binary.LittleEndian.AppendUint16(p, bad.LID)
		p = append(p, bad.MTU, 0, bad.NIC, bad.NICs)
		p = append(p, bad.GID[:]...)
		var got RDMAConnect
		require.ErrorIs(t, got.DecodePayload(Header{Version: Version, Type: TypeRDMAConnect, Length: uint32(len(p))}, p), ErrMalformed, name)
	}

	p := frame[HeaderSize:]
	h := Header{Version: Version, Type: TypeRDMAConnect, Length: uint32(len(p))}
	var got RDMAConnect
	reserved := append([]byte(nil), p...)
	reserved[11] = 1
	require.ErrorIs(t, got.DecodePayload(h, reserved), ErrMalformed, "reserved byte")
	require.ErrorIs(t, got.DecodePayload(Header{Version: Version, Type: TypeRDMAConnect, Length: uint32(len(p) - 1)}, p[:len(p)-1]), ErrMalformed, "truncated")
	long := append(append([]byte(nil), p...), 0)
	require.ErrorIs(t, got.DecodePayload(Header{Version: Version, Type: TypeRDMAConnect, Length: uint32(len(long))}, long), ErrMalformed, "trailing")
	h.RequestID = 5
	require.ErrorIs(t, got.DecodePayload(h, p), ErrMalformed, "request id on an unsolicited message")
}

func TestLocalRDMA(t *testing.T) {
	k := testKey()
	put := &Put{Request{RequestID: 3, Key: k, Length: 4096, Local: Local{Kind: LocalRDMA, Addr: 0x1000, RKey: 0xbeef}}}
	frame, err := AppendFrame(nil, put)
	require.NoError(t, err)
	_, m, err := Decode(frame, 0)
	require.NoError(t, err)
	require.Equal(t, put, m)

	// A region that wraps is refused both ways.
	bad := *put
	bad.Local.Addr = 1<<64 - 100
	_, err = AppendFrame(nil, &bad)
	require.ErrorIs(t, err, ErrInvalid)
	wrapped := append([]byte(nil), frame...)
	off := len(wrapped) - 16 // Addr u64, RKey u32, reserved u32
	binary.LittleEndian.PutUint64(wrapped[off:], 1<<64-100)
	_, _, err = Decode(wrapped, 0)
	require.ErrorIs(t, err, ErrMalformed)
	// Reserved bytes after the rkey must be zero.
	res := append([]byte(nil), frame...)
	res[len(res)-1] = 1
	_, _, err = Decode(res, 0)
	require.ErrorIs(t, err, ErrMalformed)
	// Truncated.
	short := append([]byte(nil), frame[:len(frame)-4]...)
	binary.LittleEndian.PutUint32(short[8:], uint32(len(short)-HeaderSize))
	_, _, err = Decode(short, 0)
	require.ErrorIs(t, err, ErrMalformed)
}
