//go:build race

package engine

// raceEnabled: the race detector is on; sync.Pool then drops a quarter of what is put in it on
// purpose, so tests of what the pool saves do not hold.
const raceEnabled = true
