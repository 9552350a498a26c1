//go:build !race

package reconciletrace

const raceEnabled = false
