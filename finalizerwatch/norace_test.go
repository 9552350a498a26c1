//go:build !race

package finalizerwatch

const concurrentPerGoroutine = 100_000

const millionDepth = 20

const randomOps = 1_000_000
