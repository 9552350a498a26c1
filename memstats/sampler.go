package memstats

import (
	"context"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gcprobe/probe/internal/lifecycle"
)

// Errors wrapped by Start and Run; the same values as tracing's and the
// root package's, so errors.Is works with any of them.
var (
	// ErrRunning is wrapped by the error of Start or Run while the
	// sampler already runs.
	ErrRunning = lifecycle.ErrRunning
	// ErrStopped is wrapped by the error of Start or Run after Stop, or
	// after a Run has ended: a sampler runs once.
	ErrStopped = lifecycle.ErrStopped
)

// Sampler samples the runtime's GC and finalizer/cleanup state without
// stopping the world. Create it with New; see the package documentation.
type Sampler struct {
	cfg config

	// read fills a round's reading; it is s.readRuntime except in tests
	// that feed readings in.
	read func(now time.Time, r *reading)

	// mu guards a sampling round and everything it writes: the sample
	// slice and GCStats buffers below are built once and reused by every
	// round, which is what makes a round allocation-free, and
	// metrics.Read and debug.ReadGCStats write into them, so two rounds
	// must not overlap. The lock is cheap to hold: a round takes a few
	// microseconds, it runs once per interval and once per GC cycle, and
	// readers (Snapshot, Pauses) only copy.
	mu           sync.Mutex
	samples      []metrics.Sample
	gcstats      debug.GCStats
	cur          reading
	snap         Snapshot // PauseHistogram left empty: hist is the truth
	lastNumGC    uint64   // cycles ingested, extended past the runtime's uint32
	pausesMissed uint64
	pauses       pauseRing
	hist         Histogram
	rates        rateRing
	anchor       growthAnchor
	fin, cln     latencyState
	sent         *sentinelState // the running chains; nil when not running
	drops        uint64         // drops of chains that have ended
	memStats     runtime.MemStats
	msInfo       ReadMemStatsInfo
	det          detectors
	wstate       workState

	sentinelRuns [2]atomic.Uint64 // see SentinelRuns

	subsMu  sync.Mutex
	subs    atomic.Pointer[[]subscriber]
	nextSub uint64

	life lifecycle.Lifecycle // idle → running → stopped, once
}

// growthAnchor is the round queue growth is measured from: the latest one
// at least an interval old.
type growthAnchor struct {
	t        time.Time
	fin, cln uint64
	ok       bool
	finRate  float64
	clnRate  float64
}

// New returns a Sampler configured by opts. It does not start sampling:
// call Start, Run, or Sample. A bad option value is an *OptionError naming
// the option.
func New(opts ...Option) (*Sampler, error) {
	cfg := defaultConfig()
	if err := cfg.apply(opts); err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// Own copy: the bounds are exported and could change under us.
	cfg.pauseBuckets = append([]float64(nil), cfg.pauseBuckets...)

	s := &Sampler{
		cfg:     cfg,
		samples: newSamples(),
		pauses:  newPauseRing(cfg.history, cfg.pauseWindow),
		rates:   rateRing{window: cfg.rateWindow},
		hist: Histogram{
			Bounds: cfg.pauseBuckets,
			Counts: make([]uint64, len(cfg.pauseBuckets)+1),
		},
	}
	s.det = newDetectors(&s.cfg)
	s.msInfo.Enabled = cfg.readMemStats
	s.snap.ReadMemStats = s.msInfo
	s.read = s.readRuntime
	s.life.Name = "memstats: Sampler"
	return s, nil
}

// Start starts sampling in a background goroutine, until Stop. A sampler
// runs once: Start returns an error wrapping ErrRunning if it already runs,
// and ErrStopped once it has been stopped (make a new Sampler instead).
func (s *Sampler) Start() error {
	return s.life.Start(func() error {
		st := s.arm()
		done := s.life.Done()
		s.life.Go(func() { s.loop(done, st) })
		return nil
	}, nil)
}

// Run samples until ctx is done or Stop is called, then stops the sampler
// and returns nil: the shape of a controller-runtime manager.Runnable, for
// callers that manage their own goroutines. Like Start, it runs a sampler
// once: it returns an error wrapping ErrRunning if the sampler already
// runs, and ErrStopped once it has been stopped or a Run has ended.
func (s *Sampler) Run(ctx context.Context) error {
	var st *sentinelState
	return s.life.Run(ctx,
		func() error { st = s.arm(); return nil },
		func(ctx context.Context) { s.loop(ctx.Done(), st) },
		nil)
}

// Stop stops sampling and waits for the sampling goroutine (or Run) to
// end; the sentinels stop re-arming. Stop is idempotent and safe to call
// concurrently, also on a sampler that never ran; a stopped sampler cannot
// be started again, but Sample, Snapshot and the other readers keep
// working. Stop must not be called from a Subscribe handler (it would wait
// for itself).
func (s *Sampler) Stop() { _ = s.life.Stop(nil) }

// arm starts a run's sentinel chains and hands them to the rounds.
func (s *Sampler) arm() *sentinelState {
	st := newSentinelState(s.cfg.clock, &s.sentinelRuns)
	s.mu.Lock()
	s.sent = st
	s.fin, s.cln = latencyState{}, latencyState{}
	s.mu.Unlock()
	st.start()
	return st
}

// loop is the sampling goroutine: a round now, then one per tick and per
// sentinel wake-up.
func (s *Sampler) loop(done <-chan struct{}, st *sentinelState) {
	t := s.cfg.clock.NewTicker(s.cfg.interval)
	defer func() {
		t.Stop()
		st.stop()
		s.mu.Lock()
		s.sent = nil
		s.drops += st.drops.Load()
		s.mu.Unlock()
	}()
	s.Sample()
	for {
		select {
		case <-done:
			return
		case <-t.C():
		case <-st.wake:
		}
		s.Sample()
	}
}

// Sample performs one sampling round synchronously and delivers the events
// it produces to the subscribers. It allocates nothing in steady state.
// Without Start or Run it works too, minus the queue latencies, which need
// the sentinels.
func (s *Sampler) Sample() {
	var evs [numDetectors]Event
	s.mu.Lock()
	n := s.sampleLocked(&evs)
	s.mu.Unlock()
	s.dispatch(evs[:n])
}

func (s *Sampler) sampleLocked(evs *[numDetectors]Event) int {
	now := s.cfg.clock.Now()
	r := &s.cur
	s.read(now, r)

	sn := &s.snap
	sn.Time = now
	sn.Samples++
	sn.Cycles, sn.ForcedCycles = r.cycles, r.forced
	sn.HeapLive, sn.HeapGoal = r.heapLive, r.heapGoal
	sn.GOGC, sn.MemoryLimit = r.gogc, r.memoryLimit
	sn.MCacheInuse = r.mcacheInuse
	sn.StopTheWorldGC, sn.StopTheWorldOther = r.stwGC, r.stwOther

	s.det.queues(now, r, sn)
	s.growth(now, sn)

	sn.PauseP50, sn.PauseP99, sn.PauseMax = s.pauses.quantiles()
	sn.PauseWindow = min(s.pauses.n, s.pauses.window)
	sn.PausesMissed = s.pausesMissed

	// The window's first point, copied: observe may overwrite its slot.
	var base ratePoint
	b := s.rates.base(now)
	if b != nil {
		base = *b
		b = &base
	}
	sn.GCCPUFraction, sn.ForcedPerMinute = s.rates.observe(ratePoint{
		t: now, cpuGC: r.cpuGC, cpuTotal: r.cpuTotal, forced: r.forced,
		cycles: r.cycles, allocBytes: r.allocBytes, stwGC: r.stwGC,
		cpuAssist: r.cpuAssist, cpuDedicated: r.cpuDedicated,
		cpuIdle: r.cpuIdle, cpuPause: r.cpuPause,
		stwStopSec: r.stwStopSec, stwTotalSec: r.stwTotalSec,
	})
	s.work(now, r, b, sn)

	sn.ReadMemStats = s.msInfo
	sn.Drops = s.drops
	if st := s.sent; st != nil {
		sn.Drops += st.drops.Load()
	}
	return s.det.evaluate(sn, evs)
}

// growth updates the queues' growth rates once the anchor round is at least
// an interval old, so that the closely spaced rounds GC cycles trigger do
// not turn the rate into noise.
func (s *Sampler) growth(now time.Time, sn *Snapshot) {
	a := &s.anchor
	if a.ok {
		if dt := now.Sub(a.t); dt >= s.cfg.interval {
			sec := dt.Seconds()
			a.finRate = (float64(sn.Finalizers.Length) - float64(a.fin)) / sec
			a.clnRate = (float64(sn.Cleanups.Length) - float64(a.cln)) / sec
		} else {
			sn.Finalizers.GrowthPerSecond, sn.Cleanups.GrowthPerSecond = a.finRate, a.clnRate
			return
		}
	}
	a.t, a.fin, a.cln, a.ok = now, sn.Finalizers.Length, sn.Cleanups.Length, true
	sn.Finalizers.GrowthPerSecond, sn.Cleanups.GrowthPerSecond = a.finRate, a.clnRate
}

func sub0(a, b uint64) uint64 {
	if a < b {
		return 0
	}
	return a - b
}

// readRuntime is the real reading: runtime/metrics, the GC pause history,
// the sentinels, and ReadMemStats when it is on and due.
func (s *Sampler) readRuntime(now time.Time, r *reading) {
	metrics.Read(s.samples)
	fillFromMetrics(s.samples, r)
	s.wstate.readWork(s.samples, r)

	// ReadGCStats takes the heap lock, not the world. Its Pause and
	// PauseEnd slices keep their capacity from one call to the next, so
	// it allocates only the first time.
	debug.ReadGCStats(&s.gcstats)
	s.ingest()

	r.finLatency, r.finPending, r.clnLatency, r.clnPending = 0, false, 0, false
	if st := s.sent; st != nil {
		ns := now.UnixNano()
		r.finLatency, r.finPending = s.fin.update(st.fin.load(), s.gcstats.PauseEnd, ns)
		r.clnLatency, r.clnPending = s.cln.update(st.cln.load(), s.gcstats.PauseEnd, ns)
		r.finRuns, r.clnRuns = s.fin.seenRuns, s.cln.seenRuns
	}

	if s.cfg.readMemStats && (s.msInfo.Calls == 0 || now.Sub(s.msInfo.Last) >= s.cfg.readMemStatsEvery) {
		// Its cost is measured in wall time whatever the Clock: it is
		// a measurement, not a scheduling decision.
		start := time.Now()
		runtime.ReadMemStats(&s.memStats)
		d := time.Since(start)
		s.msInfo.Calls++
		s.msInfo.Last = now
		s.msInfo.LastDuration = d
		s.msInfo.TotalDuration += d
	}
}

// ingest adds the cycles completed since the previous round to the pause
// history and the histogram, oldest first.
func (s *Sampler) ingest() {
	g := &s.gcstats
	// The runtime counts cycles in a uint32; extend it, so that
	// Pause.Cycle keeps increasing past 2^32 cycles.
	fresh := uint64(uint32(g.NumGC) - uint32(s.lastNumGC))
	if fresh == 0 {
		return
	}
	num := s.lastNumGC + fresh
	if avail := uint64(len(g.Pause)); fresh > avail {
		// The runtime remembers the latest 256 cycles only. Before
		// the first round, older cycles are history, not misses.
		if s.snap.Samples > 0 {
			s.pausesMissed += fresh - avail
		}
		fresh = avail
	}
	for i := int(fresh) - 1; i >= 0; i-- {
		s.addPause(Pause{Cycle: num - uint64(i), End: g.PauseEnd[i], Duration: g.Pause[i]})
	}
	s.lastNumGC = num
}

func (s *Sampler) addPause(p Pause) {
	s.pauses.push(p)
	s.hist.observe(p.Duration)
}

// Snapshot returns the latest round's picture. It allocates the
// histogram's slices; SnapshotInto reuses the caller's.
func (s *Sampler) Snapshot() Snapshot {
	var sn Snapshot
	s.SnapshotInto(&sn)
	return sn
}

// SnapshotInto copies the latest round's picture into dst, reusing
// dst.PauseHistogram's slices when they are large enough: a caller that
// keeps one Snapshot allocates nothing after the first call.
func (s *Sampler) SnapshotInto(dst *Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := dst.PauseHistogram
	*dst = s.snap
	dst.PauseHistogram = h
	s.hist.copyInto(&dst.PauseHistogram)
}

// Pauses appends to dst the pause history the sampler keeps (the latest
// WithHistory cycles), oldest first, and returns the extended slice.
func (s *Sampler) Pauses(dst []Pause) []Pause {
	return s.PausesSince(0, dst)
}

// PausesSince appends to dst the kept pauses of the cycles after cycle
// (Pause.Cycle > cycle), oldest first, and returns the extended slice.
// Passing the latest Cycle already seen yields only what is new.
func (s *Sampler) PausesSince(cycle uint64, dst []Pause) []Pause {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pauses.appendSince(dst, cycle)
}

// LastMemStats copies into dst the result of the sampler's latest
// runtime.ReadMemStats call and returns when it was made; ok is false when
// none was made (WithReadMemStats is off, or no round has run).
func (s *Sampler) LastMemStats(dst *runtime.MemStats) (at time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.msInfo.Calls == 0 {
		return time.Time{}, false
	}
	*dst = s.memStats
	return s.msInfo.Last, true
}

// SentinelRuns returns how many GC-cycle sentinel finalizers and cleanups
// the sampler has been told of since it was made. The sentinels are the
// process's one chain, shared with every finalizerwatch.Watcher (the
// package internal/gcclock), so a caller that compares the runtime's
// executed counts with its own must subtract every run of that chain, not
// these: the Prometheus exporter does.
func (s *Sampler) SentinelRuns() (finalizers, cleanups uint64) {
	return s.sentinelRuns[0].Load(), s.sentinelRuns[1].Load()
}
