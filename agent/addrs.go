package agent

import "slices"

// maxAddrs bounds the side-channel addresses (Connect) an agent keeps for
// names whose peer is not cached: a peer reached under a new name each
// time (a perf target connects to every initiator's hello) would grow
// them for the agent's life otherwise. Beyond it, the least recently
// Connected such name is forgotten: Peer then finds it no more
// (meta.ErrNotFound) until it is Connected again. Names cached or being
// resolved are always kept.
const maxAddrs = 1024

// keepAddr records addr as the named agent's (a.mu held), and forgets the
// least recently Connected names not cached nor resolving beyond
// a.maxAddrs.
func (a *Agent) keepAddr(name, addr string) {
	if _, ok := a.addrs[name]; ok {
		if i := slices.Index(a.addrOrder, name); i >= 0 {
			a.addrOrder = slices.Delete(a.addrOrder, i, i+1)
		}
	}
	a.addrs[name] = addr
	a.addrOrder = append(a.addrOrder, name)
	over := len(a.addrOrder) - a.maxAddrs
	if over <= 0 {
		return
	}
	a.addrOrder = slices.DeleteFunc(a.addrOrder, func(n string) bool {
		if over <= 0 || n == name || a.peers[n] != nil || a.resolving[n] != nil {
			return false
		}
		delete(a.addrs, n)
		over--
		return true
	})
}
