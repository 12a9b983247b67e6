package wire

import (
	"bytes"
	"encoding/binary"
	"strings"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef")

// testKey returns a valid, signed host key.
func testKey() RemoteKey {
	k := RemoteKey{
		Owner:      EngineID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		OwnerPID:   4242,
		OwnerPIDNS: 4026531836,
		AllocID:    7,
		Generation: 3,
		MemType:    MemHost,
		Device:     -1,
		Flags:      KeyRead | KeyWrite,
		Base:       0x7f00_0000_0000,
		Length:     1 << 20,
		RKey:       0,
		Len:        1 << 20,
	}
	if err := Sign(&k, testSecret); err != nil {
		panic(err)
	}
	return k
}

// testGaudiKey returns a valid, signed device key with a narrowed view.
func testGaudiKey() RemoteKey {
	k := testKey()
	k.MemType, k.Device, k.Flags = MemGaudi, 1, KeyRead
	k.Base, k.Length, k.RKey = 0x1001_0000_0000, 64<<20, 0xabcdef
	k.NICRKeys = [2]uint32{0x1234, 0x5678}
	k.Offset, k.Len = 4096, 8192
	if err := Sign(&k, testSecret); err != nil {
		panic(err)
	}
	return k
}

// sampleMessages returns one or more valid instances of every message type.
func sampleMessages() []Message {
	k, g := testKey(), testGaudiKey()
	hello := Hello{MinVersion: 1, MaxVersion: 1, Caps: CapFDPassing | CapSharedHost | 1<<40, PID: 100, PIDNamespace: 4026531836,
		UID: 1000, EngineID: EngineID{0xee}, Name: "trainer-0"}
	return []Message{
		&hello,
		&Hello{MinVersion: 1, MaxVersion: 1, Name: strings.Repeat("n", MaxNameLen)},
		&HelloAck{Hello: hello, Version: 1, Accepted: CapFDPassing},
		&Error{RequestID: 9, Code: StatusOutOfRange, Message: "offset 12 beyond view"},
		&Error{Code: StatusVersion},
		&Error{RequestID: 1, Code: Status(999), Message: strings.Repeat("e", MaxErrorLen)},
		&k,
		&g,
		&Put{Request{RequestID: 1, Key: k, Offset: 16, Length: 4096, Local: Local{Kind: LocalInline}}},
		&Put{Request{RequestID: 2, Key: g, Offset: 0, Length: 8192, Local: Local{Kind: LocalKey, Key: k, Offset: 4096}}},
		&Get{Request{RequestID: 3, Key: g, Offset: 4096, Length: 4096, Local: Local{Kind: LocalKey, Key: k, Offset: 0}}},
		&Get{Request{RequestID: 1 << 63, Key: k, Offset: 0, Length: 1, Local: Local{Kind: LocalInline}}},
		&Put{Request{RequestID: 7, Key: g, Offset: 0, Length: 8192, Local: Local{Kind: LocalRDMA, Addr: 0x7f12_3456_7000, RKey: 0x1234}}},
		&Get{Request{RequestID: 8, Key: g, Offset: 4096, Length: 1, Local: Local{Kind: LocalRDMA, Addr: 1<<64 - 4096, RKey: 0}}},
		&Completion{RequestID: 3, Status: StatusOK},
		&Completion{RequestID: 4, Status: StatusStale},
		&Invalidate{AllocID: 7, Generation: 3},
		&ImportRequest{RequestID: 5, Key: k},
		&ImportReply{RequestID: 5, AllocID: 7, Generation: 3, Kind: FDMemfd, Size: 1 << 20},
		&ImportReply{RequestID: 6, AllocID: 8, Generation: 1, Kind: FDDMABuf, FileOffset: 1 << 30, Size: 4096},
		&Bye{},
		&Bye{Reason: "closed to make room for another peer"},
		&Bye{Reason: strings.Repeat("r", MaxErrorLen)},
		&Heartbeat{},
		&Heartbeat{Used: true},
		&Data{RequestID: 1, Offset: 4096, Bytes: []byte("payload bytes")},
		&RDMAConnect{QPN: 0x11, PSN: 0xabcdef, MTU: 5, NICs: 1, GID: [16]byte{0xfe, 0x80, 15: 1}},
		&RDMAConnect{QPN: 1<<24 - 1, LID: 7, MTU: 1, NIC: 2, NICs: 3},
		&Auth{Nonce: [AuthSize]byte{1, 2, 3}, MAC: [AuthSize]byte{31: 9}},
		&Cancel{RequestID: 5, Sent: 3 << 20},
		&Cancel{RequestID: 1 << 63},
		&AppMsg{Bytes: []byte("kv block 7 ready")},
		&AppMsg{Bytes: []byte{}},
		&AppMsg{Bytes: bytes.Repeat([]byte{0xa5}, MaxAppMsg)},
		&MsgCredit{Msgs: 256, Bytes: 4 << 20},
		&MsgCredit{Msgs: 1<<32 - 1, Bytes: 1<<64 - 1},
		&PutList{ListRequest{RequestID: 9, Keys: []RemoteKey{k, g}, Entries: []ListEntry{{Key: 1, Offset: 4096, Length: 4096}, {Key: 0, Offset: 16, Length: 65536}, {Key: 1}}}},
		&GetList{ListRequest{RequestID: 10, Keys: []RemoteKey{k}, Entries: []ListEntry{{Offset: 1 << 19, Length: 1 << 19}}}},
		&ListReply{RequestID: 9, Statuses: []Status{StatusOK, StatusBadKey, StatusOK}, Message: "entry 1: bad key"},
		&ListReply{RequestID: 10, Statuses: []Status{StatusOK}},
		&MsgRing{Msgs: 256, Bytes: 4 << 20, Size: 4<<20 + 4096},
		&MsgRing{Msgs: 1<<32 - 1, Bytes: 1<<64 - 1, Size: 1<<64 - 1},
		&MsgBell{},
	}
}

// frame builds a raw frame with the given header fields and payload.
func rawFrame(h Header, payload []byte) []byte {
	if h.Version == 0 {
		h.Version = Version
	}
	h.Length = uint32(len(payload))
	return append(h.Append(nil), payload...)
}

func putU32(b []byte, off int, v uint32) []byte {
	b = append([]byte(nil), b...)
	binary.LittleEndian.PutUint32(b[off:], v)
	return b
}
