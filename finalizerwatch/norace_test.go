//go:build !race

package finalizerwatch

const concurrentPerGoroutine = 100_000

const millionDepth = 20

const randomOps = 1_000_000

// heavyChurn is the churn per GC cycle beside a slow leak in
// TestGrowthScenarios: the figure.
const heavyChurn = 100_000

// burstRegistrations is TestAddressTableShrinksWhenIdle's burst.
const burstRegistrations = 100_000
