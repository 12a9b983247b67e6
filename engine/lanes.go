package engine

import (
	"context"

	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/tcp"
)

// Lanes: the TCP data path opens extra connections of a dialed endpoint
// (internal/datapath/tcp, lanes.go); dialing them is the engine's.

var _ tcp.LaneDialer = (*env)(nil)

// dialInfoKey keys how an endpoint was dialed, in the context its
// Transport.Connect gets (DialLane dials its lanes the same way).
type dialInfoKey struct{}

// laneKey marks the context of a lane's dial (newEndpoint reads it).
type laneKey struct{}

type dialInfo struct {
	network, addr string
	opts          []DialOption
}

func withDialInfo(ctx context.Context, network, addr string, opts []DialOption) context.Context {
	return context.WithValue(ctx, dialInfoKey{}, dialInfo{network, addr, opts})
}

// DialLane opens a lane of c's endpoint: a connection dialed as Dial
// dialed c's, whose Hello carries wire.CapLane, to the engine c reaches
// (another engine answering at the address is refused).
func (e *env) DialLane(ctx context.Context, c datapath.Ctrl) (datapath.Ctrl, error) {
	d, ok := ctx.Value(dialInfoKey{}).(dialInfo)
	if !ok {
		return nil, newErr(ErrInvalid, "lane of "+c.Name()+": not a dialed endpoint", nil)
	}
	peer := c.PeerHello().EngineID
	ep, err := e.eng().dial(ctx, d.network, d.addr, d.opts, &peer)
	if err != nil {
		return nil, err
	}
	return ep.ch, nil // its Close closes the lane
}
