package engine

import (
	"github.com/gxfer/gxfer/internal/datapath"
	"github.com/gxfer/gxfer/internal/datapath/shm"
)

// The shared-memory transport's state, for the engine's tests of "unix"
// endpoints.

// shm is the engine's shared-memory transport.
func (e *Engine) shm() *shm.Transport { return e.transports.Get(datapath.KindIPC).(*shm.Transport) }

// shmPath is a "unix" endpoint's data path.
func (ep *Endpoint) shmPath() *shm.Path { return ep.path.(*shm.Path) }

// importerCount counts the endpoints recorded as mapping b.
func (b *Buffer) importerCount() int { return shm.Importers(b.dp()) }
