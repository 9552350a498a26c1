package memstats

import (
	"slices"
	"time"
)

// Detector names, as they appear in Event.Detector.
const (
	// DetectorQueueStalled fires when the finalizer (or cleanup) queue is
	// longer than its threshold while, over the queue window, it drains
	// slower than it fills, or not at all: a finalizer is blocked, or
	// they run slower than they arrive. Only the time the queue was not
	// empty counts for the drain rate, so idleness before a burst is not
	// a stall. Value and Threshold are queue lengths.
	DetectorQueueStalled = "finalizer_queue_stalled"
	// DetectorForcedGC fires when the forced GC cycles of the trailing
	// rate window (a minute by default), counted exactly, reach a rate per
	// minute: something calls runtime.GC or debug.FreeOSMemory in a loop.
	// Value and Threshold are cycles per minute.
	DetectorForcedGC = "forced_gc"
	// DetectorMCacheInuse fires when the per-P allocation caches have
	// stayed above a size for a while. Value and Threshold are bytes.
	// See DefaultMCacheInuseBytes: with the default it fires on no
	// ordinary machine.
	DetectorMCacheInuse = "mcache_inuse"
	// DetectorQueueLatency fires when the finalizer or the cleanup queue
	// delay (Queue.Latency: the backlog estimate and the sentinel
	// together) exceeds a threshold. Value and Threshold are seconds.
	DetectorQueueLatency = "queue_latency"
	// DetectorFinalizerBlocked fires when a watched finalizer or cleanup
	// has been running longer than a threshold (WithFinalizerBlocked),
	// holding up every callback queued behind it; Event.Kind and
	// Event.Site name it. It needs a source of running callbacks
	// (WithRunning), which the probe wires to its finalizerwatch.Watcher.
	// Value and Threshold are seconds.
	DetectorFinalizerBlocked = "finalizer_blocked"
)

const (
	detStalled = iota
	detForced
	detMCache
	detLatency
	detBlocked
	// The causes of GC work (cause_detectors.go).
	detAllocation
	detLiveGrowth
	detMemoryLimit
	detStopping
	detAssist
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
	case detBlocked:
		return DetectorFinalizerBlocked
	case detAllocation:
		return DetectorAllocationDriven
	case detLiveGrowth:
		return DetectorLiveHeapGrowth
	case detMemoryLimit:
		return DetectorMemoryLimitPressure
	case detStopping:
		return DetectorStoppingLatency
	case detAssist:
		return DetectorAssistHeavy
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
	// Kind and Site name the callback a finalizer_blocked event is
	// about ("finalizer" or "cleanup", and "function file:line"); empty
	// for the other detectors.
	Kind, Site string
	// Reason tells apart the causes one detector can have: for
	// stopping_latency, ReasonCPUStarvation or ReasonSafePoint; empty
	// for the other detectors.
	Reason string
	// Fix is what to change, in words with numbers where the detector
	// has them (e.g. the GOGC to set for an allocation-driven program
	// with a tiny live heap); empty when the event itself has nothing to
	// add to Cause.
	Fix string
}

// The reasons of a stopping_latency event (Event.Reason).
const (
	// ReasonCPUStarvation: the threads were short of CPU while the world
	// stopped (the node, or the container's CPU limit): goroutines
	// waited long to run, or the kernel's CPU pressure was high.
	ReasonCPUStarvation = "cpu_starvation"
	// ReasonSafePoint: CPU was there, and a goroutine was slow to reach
	// a safe point.
	ReasonSafePoint = "safe_point"
)

// detState is one detector's state across rounds.
type detState struct {
	firing    bool
	threshold float64
	event     Event // the firing event, Value kept current; for Active

	// The hysteresis of a cause detector (WithCauseHysteresis): when its
	// condition last stopped holding while it fired, and when it last
	// changed state.
	offSince, changed time.Time
}

// detectors holds every detector's state. It is part of the sampler's
// round, guarded by the sampler's mutex.
type detectors struct {
	cfg *config
	st  [numDetectors]detState

	// The queues across rounds, and this round's estimates.
	finQ, clnQ     queueTrack
	finEst, clnEst queueEstimate

	mcacheAbove               time.Time // since when above; zero if not
	forcedSince, latencySince time.Time
	causeSince                [numCauses]time.Time

	// What stopping_latency tells CPU starvation by (pressure.go): the
	// latest figures, the reads they came from, and when.
	pressure     float64
	pressureRead cpuPressure
	runWait      time.Duration
	runWaitRead  runWaitTotal
	starvedAt    time.Time

	// finalizer_blocked: the latest answer of cfg.running, and when it
	// was asked.
	running   Running
	runningOK bool
	askedAt   time.Time
}

func newDetectors(cfg *config) detectors {
	d := detectors{cfg: cfg}
	d.st[detStalled].threshold = float64(cfg.stalledLength)
	d.st[detForced].threshold = cfg.forcedPerMinute
	d.st[detMCache].threshold = float64(cfg.mcacheBytes)
	d.st[detLatency].threshold = cfg.queueLatency.Seconds()
	d.st[detBlocked].threshold = cfg.blockedAfter.Seconds()
	d.initCauses()
	return d
}

// evaluate runs every detector on the round's snapshot and writes the
// events it produces to evs, returning how many.
func (d *detectors) evaluate(s *Snapshot, evs *[numDetectors]Event) int {
	now := s.Time
	n := 0

	// finalizer_queue_stalled, over both queues.
	finStalled, finSince := d.stalled(&d.finQ, &d.finEst, s.Finalizers.Length)
	clnStalled, clnSince := d.stalled(&d.clnQ, &d.clnEst, s.Cleanups.Length)
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
	m := d.step(detForced, forced, s.ForcedPerMinute, d.forcedSince, now, evs, n)
	d.annotate(detForced, "", fixForced, evs[n:m])
	n = m

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

	// finalizer_blocked.
	n = d.blocked(now, evs, n)

	// Why the GC works hard.
	n = d.causes(s, evs, n)
	return n
}

// stalled reports whether a queue of the given length is stalled, given
// its track and this round's estimate, and since when: the queue is over
// the threshold, has been non-empty for at least stalledFor, and over the
// window drained slower than it filled, or not at all. The drain rate
// counts only the time the queue was non-empty (see queueTrack.observe).
func (d *detectors) stalled(q *queueTrack, e *queueEstimate, length uint64) (bool, time.Time) {
	if length <= d.cfg.stalledLength || !q.busy || e.busyFor <= 0 || e.busyFor < d.cfg.stalledFor {
		return false, time.Time{}
	}
	if e.drained == 0 {
		// Not at all: since it last moved (or became non-empty).
		return true, q.lastAdvance
	}
	if e.rateOK && e.drain < e.fill {
		return true, q.busyStart.t
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
// A cause detector (IsCause) moves with hysteresis: it fires once its
// condition has held for the configured time, resolves once the condition
// has not held for the hold time, and changes state at most once per hold
// time, so a condition that flickers logs nothing and one that holds logs
// one line.
func (d *detectors) step(i int, cond bool, value float64, since, now time.Time, evs *[numDetectors]Event, n int) int {
	if d.cfg.disabled[i] {
		return n
	}
	st := &d.st[i]
	hyst := isCause(i)
	settled := !hyst || st.changed.IsZero() || now.Sub(st.changed) >= d.cfg.causeHold
	switch {
	case cond && !st.firing:
		if hyst && (now.Sub(since) < d.cfg.causeFireAfter || !settled) {
			return n
		}
		st.firing, st.changed, st.offSince = true, now, time.Time{}
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
		if st.offSince.IsZero() {
			st.offSince = now
		}
		if hyst && (now.Sub(st.offSince) < d.cfg.causeHold || !settled) {
			return n
		}
		st.firing, st.changed, st.offSince = false, now, time.Time{}
		e := st.event
		e.Value, e.Time, e.Firing = value, now, false
		evs[n] = e
		n++
	case cond:
		st.offSince = time.Time{}
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
