//go:build race

package finalizerwatch

const concurrentPerGoroutine = 10_000

const millionDepth = 16

const randomOps = 100_000
