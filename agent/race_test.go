//go:build race

package agent

// raceEnabled: the race detector drops a quarter of sync.Pool's puts and
// allocates for its own bookkeeping.
const raceEnabled = true
