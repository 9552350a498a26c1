package memstats

import (
	"slices"
	"time"
)

// Detector names, as they appear in Event.Detector.
const (
	// DetectorQueueStalled fires when the finalizer (or cleanup) queue is
	// longer than its threshold while its executed count stands still:
	// a finalizer is blocked, or the queue is stuck behind one.
	// Value and Threshold are queue lengths.
	DetectorQueueStalled = "finalizer_queue_stalled"
	// DetectorForcedGC fires when forced GC cycles reach a rate per
	// minute: something calls runtime.GC or debug.FreeOSMemory in a loop.
	// Value and Threshold are cycles per minute.
	DetectorForcedGC = "forced_gc"
	// DetectorMCacheInuse fires when the per-P allocation caches have
	// stayed above a size for a while. Value and Threshold are bytes.
	DetectorMCacheInuse = "mcache_inuse"
	// DetectorQueueLatency fires when the finalizer or the cleanup queue
	// latency exceeds a threshold. Value and Threshold are seconds.
	DetectorQueueLatency = "queue_latency"
)

const (
	detStalled = iota
	detForced
	detMCache
	detLatency
	numDetectors
)

func detectorName(i int) string {
	switch i {
	case detStalled:
		return DetectorQueueStalled
	case detForced:
		return DetectorForcedGC
	case detMCache:
		return DetectorMCacheInuse
	case detLatency:
		return DetectorQueueLatency
	}
	return ""
}

func detectorIndex(name string) int {
	for i := range numDetectors {
		if detectorName(i) == name {
			return i
		}
	}
	return -1
}

// Event is a detector changing state: it fires (Firing true) when its
// condition starts to hold and resolves (Firing false) when it stops.
type Event struct {
	// Detector is one of the Detector* constants.
	Detector string
	// Value is the observed value at Time; Threshold the configured one.
	// Units depend on the detector (see its constant).
	Value, Threshold float64
	// Since is when the condition began to hold: for a sustained
	// condition (mcache_inuse) or a stall, earlier than the event that
	// reports it. A resolving event carries its episode's Since.
	Since time.Time
	// Time is the sampling round that produced the event.
	Time time.Time
	// Firing is true when the detector fires, false when it resolves.
	Firing bool
}

// detState is one detector's state across rounds.
type detState struct {
	firing    bool
	threshold float64
	event     Event // the firing event, Value kept current; for Active
}

// detectors holds every detector's state. It is part of the sampler's
// round, guarded by the sampler's mutex.
type detectors struct {
	cfg *config
	st  [numDetectors]detState

	primed bool // a round has been evaluated before

	// finalizer_queue_stalled: the executed counts and when they last
	// moved, per queue.
	finExec, clnExec          uint64
	finAdvance, clnAdvance    time.Time
	mcacheAbove               time.Time // since when above; zero if not
	forcedSince, latencySince time.Time
}

func newDetectors(cfg *config) detectors {
	d := detectors{cfg: cfg}
	d.st[detStalled].threshold = float64(cfg.stalledLength)
	d.st[detForced].threshold = cfg.forcedPerMinute
	d.st[detMCache].threshold = float64(cfg.mcacheBytes)
	d.st[detLatency].threshold = cfg.queueLatency.Seconds()
	return d
}

// evaluate runs every detector on the round's snapshot and writes the
// events it produces to evs, returning how many.
func (d *detectors) evaluate(s *Snapshot, evs *[numDetectors]Event) int {
	now := s.Time
	n := 0

	// finalizer_queue_stalled, over both queues.
	finStalled, finSince := stalled(d, &d.finExec, &d.finAdvance, &s.Finalizers, now)
	clnStalled, clnSince := stalled(d, &d.clnExec, &d.clnAdvance, &s.Cleanups, now)
	d.primed = true
	value := float64(max(s.Finalizers.Length, s.Cleanups.Length))
	var since time.Time
	switch {
	case finStalled && clnStalled:
		since = finSince
		if clnSince.Before(since) {
			since = clnSince
		}
	case finStalled:
		value, since = float64(s.Finalizers.Length), finSince
	case clnStalled:
		value, since = float64(s.Cleanups.Length), clnSince
	}
	n = d.step(detStalled, finStalled || clnStalled, value, since, now, evs, n)

	// forced_gc.
	forced := s.ForcedPerMinute >= d.cfg.forcedPerMinute
	d.forcedSince = episode(forced, d.forcedSince, now)
	n = d.step(detForced, forced, s.ForcedPerMinute, d.forcedSince, now, evs, n)

	// mcache_inuse, sustained.
	above := s.MCacheInuse > d.cfg.mcacheBytes
	d.mcacheAbove = episode(above, d.mcacheAbove, now)
	sustained := above && now.Sub(d.mcacheAbove) >= d.cfg.mcacheFor
	n = d.step(detMCache, sustained, float64(s.MCacheInuse), d.mcacheAbove, now, evs, n)

	// queue_latency, the worse of the two queues.
	lat := max(s.Finalizers.Latency, s.Cleanups.Latency)
	late := lat > d.cfg.queueLatency
	d.latencySince = episode(late, d.latencySince, now)
	n = d.step(detLatency, late, lat.Seconds(), d.latencySince, now, evs, n)
	return n
}

// stalled reports whether queue q is stalled at now, and since when its
// executed count has stood still. The count is stalled when it did not move
// since the previous round, the queue is over the threshold, and it last
// moved at least stalledFor ago.
func stalled(d *detectors, exec *uint64, advance *time.Time, q *Queue, now time.Time) (bool, time.Time) {
	if !d.primed || q.Executed != *exec {
		*exec, *advance = q.Executed, now
		return false, time.Time{}
	}
	if q.Length > d.cfg.stalledLength && now.Sub(*advance) >= d.cfg.stalledFor {
		return true, *advance
	}
	return false, time.Time{}
}

// episode returns when the current episode of a condition began: since,
// or now if it begins now; zero when the condition does not hold.
func episode(cond bool, since, now time.Time) time.Time {
	switch {
	case !cond:
		return time.Time{}
	case since.IsZero():
		return now
	}
	return since
}

// step moves detector i to its new state and appends the event, if any.
func (d *detectors) step(i int, cond bool, value float64, since, now time.Time, evs *[numDetectors]Event, n int) int {
	if d.cfg.disabled[i] {
		return n
	}
	st := &d.st[i]
	switch {
	case cond && !st.firing:
		st.firing = true
		st.event = Event{
			Detector:  detectorName(i),
			Value:     value,
			Threshold: st.threshold,
			Since:     since,
			Time:      now,
			Firing:    true,
		}
		evs[n] = st.event
		n++
	case !cond && st.firing:
		st.firing = false
		e := st.event
		e.Value, e.Time, e.Firing = value, now, false
		evs[n] = e
		n++
	case cond:
		st.event.Value = value
	}
	return n
}

// appendActive appends the firing detectors' events.
func (d *detectors) appendActive(dst []Event) []Event {
	for i := range d.st {
		if d.st[i].firing {
			dst = append(dst, d.st[i].event)
		}
	}
	return dst
}

// subscriber is one Subscribe call.
type subscriber struct {
	id uint64
	fn func(Event)
}

// Subscribe registers fn to receive every Event and returns a function that
// unregisters it; calling that more than once is harmless.
//
// fn is called synchronously by the goroutine running the sampling round
// (the sampler's goroutine once Start or Run is called, or the caller of
// Sample), after the sampler's lock is released, so it may call Snapshot.
// It must be quick: while it runs, the sampler does not sample. It must
// not call Stop, which waits for the goroutine running the handler.
func (s *Sampler) Subscribe(fn func(Event)) (cancel func()) {
	if fn == nil {
		return func() {}
	}
	s.subsMu.Lock()
	defer s.subsMu.Unlock()
	s.nextSub++
	id := s.nextSub
	// Copy on write: dispatch reads the list with one atomic load and
	// no lock, so a handler may itself subscribe or cancel.
	var subs []subscriber
	if p := s.subs.Load(); p != nil {
		subs = slices.Clone(*p)
	}
	subs = append(subs, subscriber{id: id, fn: fn})
	s.subs.Store(&subs)
	return func() {
		s.subsMu.Lock()
		defer s.subsMu.Unlock()
		p := s.subs.Load()
		if p == nil {
			return
		}
		i := slices.IndexFunc(*p, func(sub subscriber) bool { return sub.id == id })
		if i < 0 {
			return
		}
		subs := slices.Delete(slices.Clone(*p), i, i+1)
		s.subs.Store(&subs)
	}
}

// dispatch hands events to the subscribers.
func (s *Sampler) dispatch(evs []Event) {
	if len(evs) == 0 {
		return
	}
	p := s.subs.Load()
	if p == nil {
		return
	}
	for _, e := range evs {
		for _, sub := range *p {
			sub.fn(e)
		}
	}
}

// Active appends to dst one Event per detector firing now, as it fired but
// with Value updated by the latest round, and returns the extended slice.
func (s *Sampler) Active(dst []Event) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.det.appendActive(dst)
}
