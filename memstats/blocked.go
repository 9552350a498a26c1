package memstats

import "time"

// Running is a finalizer or cleanup running now, as a RunningFunc reports
// it. memstats does not import the package that knows (finalizerwatch);
// the probe passes a RunningFunc reading its watcher.
type Running struct {
	// Kind is "finalizer" or "cleanup".
	Kind string
	// Site is where the callback was registered, "function file:line".
	Site string
	// For is how long it has been running.
	For time.Duration
}

// RunningFunc reports the callback that has been running longest now, if
// any. The sampler calls it from its sampling round, at most once every
// runningEvery: it must be quick and must not call the Sampler.
type RunningFunc func() (r Running, ok bool)

// runningEvery is the least time between two calls of the RunningFunc:
// rounds a GC cycle triggers can come hundreds of times a second, and a
// finalizer blocked for a second does not need finer resolution.
const runningEvery = 250 * time.Millisecond

// blocked runs the finalizer_blocked detector for the round at now.
func (d *detectors) blocked(now time.Time, evs *[numDetectors]Event, n int) int {
	fn := d.cfg.running
	if fn == nil || d.cfg.disabled[detBlocked] {
		return n
	}
	if d.askedAt.IsZero() || now.Sub(d.askedAt) >= runningEvery || now.Before(d.askedAt) {
		d.askedAt = now
		d.running, d.runningOK = askRunning(fn)
	}
	r := d.running
	cond := d.runningOK && r.For > d.cfg.blockedAfter
	var since time.Time
	if cond {
		since = now.Add(-r.For)
	}
	st := &d.st[detBlocked]
	before := n
	n = d.step(detBlocked, cond, r.For.Seconds(), since, now, evs, n)
	if cond {
		// Fired now or still firing: the event names the callback
		// blocking now, which may be another one than before.
		if st.event.Site != r.Site || st.event.Kind != r.Kind {
			st.event.Since = since
		}
		st.event.Kind, st.event.Site = r.Kind, r.Site
		if n > before {
			evs[n-1].Kind, evs[n-1].Site = r.Kind, r.Site
		}
	}
	return n
}

// askRunning calls fn, turning a panic into "none runs": the sampler's
// round must go on whatever the source does.
func askRunning(fn RunningFunc) (r Running, ok bool) {
	defer func() {
		if recover() != nil {
			r, ok = Running{}, false
		}
	}()
	return fn()
}
