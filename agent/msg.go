package agent

import (
	"context"

	"github.com/gxfer/gxfer/engine"
)

// sendMsg and recvMsg are the endpoint's messages (Endpoint.Send and
// Recv). TEMPORARY until the engine has them.
func sendMsg(ep *engine.Endpoint, ctx context.Context, b []byte) error {
	return engine.ErrNotSupported
}

func recvMsg(ep *engine.Endpoint, ctx context.Context) ([]byte, error) {
	<-ctx.Done()
	return nil, engine.ErrNotSupported
}
