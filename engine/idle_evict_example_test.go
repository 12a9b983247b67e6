package engine_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gxfer/gxfer/engine"
)

// A full listener closes an endpoint that has been idle for longer than
// Config.PeerIdleEvict to let a new peer in; the idle peer's next Put
// fails with ErrPeer. (examples/peerlimits also shows a busy endpoint
// kept, and the lockout with eviction off.)
func ExampleConfig_peerIdleEvict() {
	owner, _ := engine.New(engine.Config{
		Devices:           engine.DevicesNone,
		MaxPeers:          2, // one TCP endpoint of two connections (TCPLanes)
		MaxPeersPerSource: 2,
		PeerIdleEvict:     50 * time.Millisecond,
	})
	defer owner.Close()
	ln, _ := owner.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	buf, _ := owner.Alloc(64, engine.Host)
	key, _ := buf.Export()

	ctx := context.Background()
	first, _ := engine.New(engine.Config{Devices: engine.DevicesNone})
	defer first.Close()
	second, _ := engine.New(engine.Config{Devices: engine.DevicesNone})
	defer second.Close()
	src, _ := first.Alloc(64, engine.Host)
	ep1, err := first.Dial(ctx, "tcp", ln.Addr())
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("first put:", ep1.PutSync(ctx, src.All(), key))

	time.Sleep(200 * time.Millisecond) // idle for longer than PeerIdleEvict
	_, err = second.Dial(ctx, "tcp", ln.Addr())
	for i := 0; i < 20 && errors.Is(err, engine.ErrTooManyPeers); i++ {
		time.Sleep(20 * time.Millisecond) // a loaded listener may note the idleness late
		_, err = second.Dial(ctx, "tcp", ln.Addr())
	}
	fmt.Println("second peer let in:", err == nil)
	fmt.Println("first put again fails with ErrPeer:", errors.Is(ep1.PutSync(ctx, src.All(), key), engine.ErrPeer))
	// Output:
	// first put: <nil>
	// second peer let in: true
	// first put again fails with ErrPeer: true
}
