//go:build race

package finalizerwatch

const concurrentPerGoroutine = 10_000

const millionDepth = 16

const randomOps = 100_000

// heavyChurn is the churn per GC cycle beside a slow leak in
// TestGrowthScenarios, a tenth of the figure without -race, where it would
// take minutes.
const heavyChurn = 10_000

// burstRegistrations is TestAddressTableShrinksWhenIdle's burst.
const burstRegistrations = 20_000
