package probe

import "github.com/gcprobe/probe/internal/lifecycle"

// GoSafe runs fn the way the probe runs its own goroutines, for tests of
// panic recovery.
func (p *Probe) GoSafe(name string, fn func()) { p.goSafe(name, fn) }

// State is the probe's lifecycle state, for the lifecycle matrix.
func (p *Probe) State() lifecycle.State { return p.life.State() }
