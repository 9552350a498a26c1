//go:build race

package bench

// raceEnabled: the race detector instruments memory accesses and allocates
// on its own, so allocation counts and speed mean nothing under it.
const raceEnabled = true
