//go:build !race

package pprofexporter

const raceEnabled = false
