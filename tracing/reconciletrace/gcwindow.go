package reconciletrace

import (
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/gcprobe/probe/memstats"
)

// The runtime/metrics a reconcile reads at its start and end.
const (
	metricCycles = "/gc/cycles/total:gc-cycles"
	metricAllocs = "/gc/heap/allocs:bytes"
)

// samplePool holds the two-sample slices read at the start and end of each
// reconcile. metrics.Read writes into the slice it is given, and reconciles
// run concurrently (MaxConcurrentReconciles), so each read needs a slice of
// its own; pooling them makes a reconcile's two reads allocation-free
// without a lock that concurrent reconciles would contend on.
var samplePool = sync.Pool{New: func() any {
	s := make([]metrics.Sample, 2)
	s[0].Name = metricCycles
	s[1].Name = metricAllocs
	return &s
}}

// gcReading is the process's GC clock and allocation counter at one
// instant.
type gcReading struct {
	cycles uint64 // completed GC cycles
	allocs uint64 // cumulative bytes allocated on the heap
	at     time.Time
}

// readGC reads both metrics with one metrics.Read. A metric the running Go
// lacks reads as zero.
func readGC() gcReading {
	p := samplePool.Get().(*[]metrics.Sample)
	s := *p
	metrics.Read(s)
	r := gcReading{at: time.Now()}
	if s[0].Value.Kind() == metrics.KindUint64 {
		r.cycles = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		r.allocs = s[1].Value.Uint64()
	}
	samplePool.Put(p)
	return r
}

// pauseStats summarises the GC pauses that overlapped a reconcile.
type pauseStats struct {
	count      int
	total, max time.Duration
}

func (p *pauseStats) add(d time.Duration) {
	p.count++
	p.total += d
	p.max = max(p.max, d)
}

// pauseBufPool and gcStatsPool hold the buffers pauses reads into, for the
// same reason as samplePool. They are used only when a GC cycle completed
// during the reconcile.
var (
	pauseBufPool = sync.Pool{New: func() any { b := make([]memstats.Pause, 0, 8); return &b }}
	gcStatsPool  = sync.Pool{New: func() any { return new(debug.GCStats) }}
)

// pauses returns the pauses of the cycles completed between start and end
// (start.cycles < cycle <= end.cycles) that overlap the reconcile's time
// window. They come from the sampler's pause history; cycles the sampler
// has not ingested yet (it learns of a cycle a moment after it ends, from a
// sentinel finalizer, or only when sampled) are read from the runtime's own
// history with debug.ReadGCStats, which takes the heap lock briefly but not
// the world.
func pauses(s *memstats.Sampler, start, end gcReading) pauseStats {
	var ps pauseStats
	if end.cycles <= start.cycles {
		return ps // the common case: no cycle ended, nothing to look up
	}
	covered := start.cycles
	if s != nil {
		bp := pauseBufPool.Get().(*[]memstats.Pause)
		buf := s.PausesSince(start.cycles, (*bp)[:0])
		for _, p := range buf {
			if p.Cycle > end.cycles {
				break // oldest first: the rest ended after the reconcile
			}
			covered = max(covered, p.Cycle)
			if overlaps(p.End, p.Duration, start.at, end.at) {
				ps.add(p.Duration)
			}
		}
		*bp = buf[:0]
		pauseBufPool.Put(bp)
	}
	if covered >= end.cycles {
		return ps
	}
	gs := gcStatsPool.Get().(*debug.GCStats)
	debug.ReadGCStats(gs)
	// Pause[i] is cycle NumGC-i's. The runtime counts cycles in a
	// uint32, so compare their low 32 bits, as the runtime does.
	for c := covered + 1; c <= end.cycles; c++ {
		i := int(uint32(gs.NumGC) - uint32(c))
		if i < 0 || i >= len(gs.Pause) || i >= len(gs.PauseEnd) {
			continue // gone from the runtime's 256-cycle history
		}
		if overlaps(gs.PauseEnd[i], gs.Pause[i], start.at, end.at) {
			ps.add(gs.Pause[i])
		}
	}
	gcStatsPool.Put(gs)
	return ps
}

// overlaps reports whether a pause of d ending at pauseEnd overlaps the
// window [from, to]. Wall clock throughout: the runtime's pause end times
// are wall-clock times.
func overlaps(pauseEnd time.Time, d time.Duration, from, to time.Time) bool {
	from, to = from.Round(0), to.Round(0)
	return !pauseEnd.Before(from) && !pauseEnd.Add(-d).After(to)
}
