//go:build race

package main

// raceEnabled is whether this test binary was built with -race: the
// builds its tests run are then built with it too, so that they reuse
// every compiled package this one's build left in the cache.
const raceEnabled = true
