package engine

import (
	"context"

	"github.com/gxfer/gxfer/wire"
)

// Lanes: a TCP endpoint opens Config.TCPLanes connections to its peer;
// transfers of laneMin bytes or more are cut into one part per lane, each
// moved as its own request on its own connection, so that the kernel's
// copies of the parts run on several cores and the request/reply gap of
// one part is covered by the others. Small transfers use the first
// connection only. The peer serves lanes like any endpoint but does not
// return them from Accept; a lane that fails fails its endpoint.

// laneMin is the smallest transfer split over the lanes.
const laneMin = 4 << 20

// openLanes dials the extra connections of ep. A lane that cannot be
// opened is logged and done without: the endpoint works on fewer.
func (e *Engine) openLanes(ctx context.Context, network, addr string, opts []DialOption, ep *Endpoint) {
	for i := 1; i < e.cfg.TCPLanes; i++ {
		l, err := e.dial(ctx, network, addr, opts, true)
		if err != nil {
			e.log.Warn().Err(err).Str("peer", ep.name).Msg("extra TCP lane not opened")
			break
		}
		l.parent = ep
		ep.lanes = append(ep.lanes, l)
	}
}

// rmaLanes splits a Put or Get over the endpoint and its lanes.
func (ep *Endpoint) rmaLanes(put bool, local Slice, k wire.RemoteKey, opts []OpOption) *Future {
	lanes := append([]*Endpoint{ep}, ep.lanes...)
	n := local.n
	parts := uint64(len(lanes))
	// Parts are 4 KiB-aligned and differ by at most one page.
	per := (n/parts + 4095) &^ 4095
	f := newFuture(int(parts))
	f.setSpin(ep.e.cfg.WaitSpin)
	for i, l := range lanes {
		off := uint64(i) * per
		m := min(per, n-min(off, n))
		if m == 0 {
			f.complete(0, nil)
			continue
		}
		sub, err := k.Slice(off, m)
		if err != nil { // cannot happen: the view was checked
			f.complete(0, newErr(ErrInvalid, "remote key range", err))
			continue
		}
		l.rmaTCP(put, local.buf.Slice(int(local.off+off), int(m)), sub, opts, f)
	}
	return f
}
