package agent

import (
	"context"

	"github.com/gxfer/gxfer/engine"
)

// sendMsg and recvMsg are the agent protocol's transport: the endpoint's
// messages (ordered after completed Puts, flow controlled).
func sendMsg(ep *engine.Endpoint, ctx context.Context, b []byte) error { return ep.Send(ctx, b) }

func recvMsg(ep *engine.Endpoint, ctx context.Context) ([]byte, error) { return ep.Recv(ctx) }

// The protocol's messages fit the endpoint's.
var _ [engine.MaxMessage - maxMessage]struct{}
