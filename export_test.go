package probe

import (
	"net"

	"github.com/gcprobe/probe/internal/lifecycle"
)

// GoSafe runs fn the way the probe runs its own goroutines, for tests of
// panic recovery.
func (p *Probe) GoSafe(name string, fn func()) { p.goSafe(name, fn) }

// State is the probe's lifecycle state, for the lifecycle matrix.
func (p *Probe) State() lifecycle.State { return p.life.State() }

// OpenConns returns how many connections the probe's own listener holds
// open, or -1 without one.
func (p *Probe) OpenConns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.listener == nil {
		return -1
	}
	return p.listener.OpenConns()
}

// CheckBound is what the probe's listener checks and logs once bound to a,
// for tests that must not bind beyond loopback to see it.
func (p *Probe) CheckBound(a net.Addr) error { return p.checkBound(a) }

// SetDeferAccept turns the listener's deferred accept on or off for the
// probes started from now on, and returns a function that restores it.
func SetDeferAccept(on bool) (restore func()) {
	was := deferAcceptOn
	deferAcceptOn = on
	return func() { deferAcceptOn = was }
}
