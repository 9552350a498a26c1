//go:build race

package pprofexporter

// raceEnabled: the race detector drops some of what is put in a
// sync.Pool, so allocation counts are not those of a normal build.
const raceEnabled = true
