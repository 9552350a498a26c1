package probe

// GoSafe runs fn the way the probe runs its own goroutines, for tests of
// panic recovery.
func (p *Probe) GoSafe(name string, fn func()) { p.goSafe(name, fn) }
