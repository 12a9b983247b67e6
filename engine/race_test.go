//go:build race

package engine

// raceEnabled: the race detector allocates for its own bookkeeping and
// changes what escapes.
const raceEnabled = true
