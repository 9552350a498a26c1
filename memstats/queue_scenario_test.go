package memstats

import (
	"testing"
	"time"
)

// finBlockSize is how many finalizers the runtime keeps per block of its
// queue (a 4 KiB finBlock of 40-byte entries on 64-bit), and so how many
// its executed count moves by at once.
const finBlockSize = 101

// item is one queued callback of the runtime model.
type item struct {
	site string
	d    time.Duration // run time; blocks while block is set
	// block makes the callback run until the test releases it.
	block *bool
}

// runtimeModel drains a finalizer queue the way the runtime does: one
// goroutine takes the whole queue as a batch, walks it from its end, and
// counts a block's finalizers as executed once the whole block has run.
// Time is virtual: advance moves it.
type runtimeModel struct {
	now              time.Duration
	pending          []item // queued since the batch was taken, oldest first
	batch            []item // being run, from its end
	blockLeft        int    // callbacks of the current block not yet run
	blockN           int    // size of the current block
	cur              *item  // running now
	curStart         time.Duration
	curLeft          time.Duration
	queued, executed uint64
}

func (m *runtimeModel) queue(it item, n int) {
	for range n {
		m.pending = append(m.pending, it)
	}
	m.queued += uint64(n)
}

// advance runs the model for d.
func (m *runtimeModel) advance(d time.Duration) {
	end := m.now + d
	for m.now < end {
		if m.cur == nil && !m.next() {
			m.now = end
			return
		}
		if m.cur.block != nil && *m.cur.block {
			m.now = end
			return
		}
		step := min(m.curLeft, end-m.now)
		m.now += step
		m.curLeft -= step
		if m.curLeft == 0 {
			m.finish()
		}
	}
}

// next starts the next callback, taking a new batch if needed.
func (m *runtimeModel) next() bool {
	if len(m.batch) == 0 {
		if len(m.pending) == 0 {
			return false
		}
		m.batch, m.pending = m.pending, nil
		m.blockLeft = 0
	}
	if m.blockLeft == 0 {
		// The batch's blocks are walked newest first; the newest
		// block is the partial one at the end.
		n := len(m.batch) % finBlockSize
		if n == 0 {
			n = finBlockSize
		}
		m.blockLeft, m.blockN = n, n
	}
	it := m.batch[len(m.batch)-1]
	m.batch = m.batch[:len(m.batch)-1]
	m.cur, m.curStart, m.curLeft = &it, m.now, it.d
	return true
}

func (m *runtimeModel) finish() {
	m.cur = nil
	m.blockLeft--
	if m.blockLeft == 0 {
		m.executed += uint64(m.blockN)
	}
}

// running is the model's RunningFunc: every callback is watched.
func (m *runtimeModel) running() (Running, bool) {
	if m.cur == nil {
		return Running{}, false
	}
	return Running{Kind: "finalizer", Site: m.cur.site, For: m.now - m.curStart}, true
}

// scenario drives a fed sampler with the model, sampling every interval
// (no GC cycle wakes it sooner: the slowest case) in steps of 10ms.
type scenario struct {
	t        *testing.T
	f        *fed
	m        *runtimeModel
	start    time.Time
	interval time.Duration
	each     func(at time.Duration) // called every 10ms step, before the model runs
	fired    map[string]time.Duration
	cleared  map[string]time.Duration
	sites    map[string]string // finalizer_blocked: site named when it fired
}

const scenarioStep = 10 * time.Millisecond

func newScenario(t *testing.T, opts ...Option) *scenario {
	m := &runtimeModel{}
	sc := &scenario{t: t, m: m, interval: DefaultInterval,
		fired: map[string]time.Duration{}, cleared: map[string]time.Duration{}, sites: map[string]string{}}
	sc.f = newFed(t, append([]Option{WithRunning(m.running)}, opts...)...)
	sc.start = sc.f.clk.Now()
	sc.sample()
	return sc
}

func (sc *scenario) at() time.Duration { return sc.m.now }

func (sc *scenario) sample() {
	sc.f.r.finQueued, sc.f.r.finExecuted = sc.m.queued, sc.m.executed
	sc.f.s.Sample()
	for _, e := range sc.f.take() {
		at := e.Time.Sub(sc.start)
		if e.Firing {
			if _, ok := sc.fired[e.Detector]; !ok {
				sc.fired[e.Detector] = at
			}
			if e.Site != "" {
				sc.sites[e.Detector] = e.Site
			}
		} else {
			sc.cleared[e.Detector] = at
		}
		sc.t.Logf("%6.2fs %-24s firing=%-5v value=%.3g site=%q", at.Seconds(), e.Detector, e.Firing, e.Value, e.Site)
	}
}

// run runs the scenario until virtual time reaches until.
func (sc *scenario) run(until time.Duration) {
	for sc.m.now < until {
		if sc.each != nil {
			sc.each(sc.m.now)
		}
		sc.m.advance(scenarioStep)
		sc.f.clk.Advance(scenarioStep)
		if sc.m.now%sc.interval == 0 {
			sc.sample()
		}
	}
}

// within checks that detector fired (or, with clear, cleared) in [from, to].
func (sc *scenario) within(detector string, clear bool, from, to time.Duration) {
	sc.t.Helper()
	m, what := sc.fired, "fire"
	if clear {
		m, what = sc.cleared, "clear"
	}
	at, ok := m[detector]
	if !ok {
		sc.t.Fatalf("%s did not %s (want in [%v, %v])", detector, what, from, to)
	}
	if at < from || at > to {
		sc.t.Fatalf("%s did %s at %v, want in [%v, %v]", detector, what, at, from, to)
	}
	sc.t.Logf("%s: %s at %v", detector, what, at)
}

func (sc *scenario) never(detector string) {
	sc.t.Helper()
	if at, ok := sc.fired[detector]; ok {
		sc.t.Fatalf("%s fired at %v, want never", detector, at)
	}
}

func (sc *scenario) quiet() {
	sc.t.Helper()
	if a := sc.f.s.Active(nil); len(a) != 0 {
		sc.t.Fatalf("at %v still firing: %v", sc.at(), eventsString(a))
	}
}

// TestScenarioBlockedBehindBacklog: a finalizer blocks, 20 000 are queued
// behind it. finalizer_blocked names its site within 2s of the threshold;
// the queue is stalled (not draining at all) and late; released, the queue
// drains and every detector clears.
func TestScenarioBlockedBehindBacklog(t *testing.T) {
	sc := newScenario(t, WithoutDetector(DetectorForcedGC))
	blocked := true
	const site = "example.com/op.(*conn).finalize op/conn.go:42"
	sc.run(50 * time.Millisecond)
	sc.m.queue(item{site: site, block: &blocked}, 1)
	sc.run(100 * time.Millisecond) // it runs now
	sc.m.queue(item{site: "example.com/op.newBuf op/buf.go:7", d: 10 * time.Microsecond}, 20000)
	sc.run(5 * time.Second)

	// It started at 50ms: over the 1s threshold from 1.05s.
	sc.within(DetectorFinalizerBlocked, false, 1050*time.Millisecond, 3050*time.Millisecond)
	if got := sc.sites[DetectorFinalizerBlocked]; got != site {
		t.Fatalf("finalizer_blocked named %q, want %q", got, site)
	}
	sc.within(DetectorQueueStalled, false, time.Second, 3*time.Second)
	sc.within(DetectorQueueLatency, false, time.Second, 4*time.Second)
	var named bool
	for _, e := range sc.f.s.Active(nil) {
		named = named || e.Detector == DetectorFinalizerBlocked && e.Site == site && e.Kind == "finalizer"
	}
	if !named {
		t.Fatalf("Active does not name the blocked site: %+v", sc.f.s.Active(nil))
	}

	blocked = false // released at 5s: 0.2s of work left
	sc.run(7 * time.Second)
	for _, d := range []string{DetectorFinalizerBlocked, DetectorQueueStalled, DetectorQueueLatency} {
		sc.within(d, true, 5*time.Second, 7*time.Second)
	}
	sc.quiet()
	if sn := sc.f.s.Snapshot(); sn.Finalizers.Length != 0 || sn.Finalizers.Latency != 0 {
		t.Fatalf("after the drain: length %d, latency %v", sn.Finalizers.Length, sn.Finalizers.Latency)
	}
}

// burst is the 2 000 finalizers of 8ms each (16s of work) of the issue.
func burst(m *runtimeModel) {
	m.queue(item{site: "example.com/op.(*file).close op/file.go:12", d: 8 * time.Millisecond}, 2000)
}

// TestScenarioSlowBurst: one burst of 2 000 finalizers of 8ms, nothing else
// registered, no GC cycle to move a sentinel. The delay rises above 1s
// within 3s; the queue drains slower than it filled over the window, so it
// is stalled while more than 1 000 wait; everything clears once it drains.
func TestScenarioSlowBurst(t *testing.T) {
	sc := newScenario(t)
	sc.run(5 * time.Second) // idle: not a stall
	burst(sc.m)
	sc.run(40 * time.Second)

	sc.within(DetectorQueueLatency, false, 5*time.Second, 8*time.Second)
	sc.within(DetectorQueueStalled, false, 5*time.Second, 8*time.Second)
	sc.never(DetectorFinalizerBlocked)
	// 16s of work: below 1 000 queued after 8s; drained after 16s.
	sc.within(DetectorQueueStalled, true, 12*time.Second, 15*time.Second)
	sc.within(DetectorQueueLatency, true, 19*time.Second, 23*time.Second)
	sc.quiet()
}

// TestScenarioSlowBurstWithChurn: the same burst amid steady healthy churn
// (200 quick finalizers a second). The churn alone fires nothing; the burst
// fires the same detectors at about the same times, and they clear.
func TestScenarioSlowBurstWithChurn(t *testing.T) {
	sc := newScenario(t)
	sc.each = func(time.Duration) {
		sc.m.queue(item{site: "example.com/op.(*req).done op/req.go:30", d: 50 * time.Microsecond}, 2)
	}
	sc.run(30 * time.Second)
	if len(sc.fired) != 0 {
		t.Fatalf("healthy churn fired %v", sc.fired)
	}
	burst(sc.m)
	sc.run(70 * time.Second)

	sc.within(DetectorQueueLatency, false, 30*time.Second, 33*time.Second)
	sc.within(DetectorQueueStalled, false, 30*time.Second, 33*time.Second)
	sc.never(DetectorFinalizerBlocked)
	sc.within(DetectorQueueStalled, true, 37*time.Second, 48*time.Second)
	sc.within(DetectorQueueLatency, true, 45*time.Second, 55*time.Second)
	sc.quiet()
}

// TestScenarioDrainsAndStaysEmpty: the last sentinel measured a long wait;
// the queue drains and no GC cycle runs a new sentinel for a minute. The
// delay falls to 0 the round the queue is seen empty and stays there.
func TestScenarioDrainsAndStaysEmpty(t *testing.T) {
	sc := newScenario(t)
	sc.m.queue(item{site: "example.com/op.slow op/slow.go:3", d: 20 * time.Millisecond}, 300) // 6s of work
	sc.run(2 * time.Second)
	// A sentinel queued before this batch ran late, and no cycle since.
	sc.f.r.finLatency, sc.f.r.finRuns = 2500*time.Millisecond, 1
	sc.run(10 * time.Second)
	sc.within(DetectorQueueLatency, false, time.Second, 3*time.Second)
	sc.within(DetectorQueueLatency, true, 5*time.Second, 8*time.Second)
	for sc.m.now < 70*time.Second {
		sc.run(sc.m.now + time.Second)
		if sn := sc.f.s.Snapshot(); sn.Finalizers.Latency != 0 || sn.Finalizers.Backlog != 0 || sn.Finalizers.SentinelLatency != 2500*time.Millisecond {
			t.Fatalf("at %v: latency %v, backlog %v, sentinel %v: want 0, 0 and the stale 2.5s", sc.at(),
				sn.Finalizers.Latency, sn.Finalizers.Backlog, sn.Finalizers.SentinelLatency)
		}
	}
	sc.quiet()
}

// TestScenarioForcedGCWindow: after two minutes of uptime without any,
// exactly 5 forced GC cycles within 60s fire forced_gc at the fifth; it
// clears when the first leaves the window. 5 spread over 61s never fire.
func TestScenarioForcedGCWindow(t *testing.T) {
	for _, tt := range []struct {
		name      string
		at        []int // the seconds at which each forced cycle is observed
		fire      int   // 0: never
		clearFrom int
	}{
		{"5 in 60s after 2 minutes", []int{125, 135, 145, 155, 184}, 184, 185},
		{"5 in the first minute", []int{1, 10, 20, 30, 40}, 40, 61},
		{"5 over 61s", []int{120, 130, 140, 150, 181}, 0, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFed(t)
			var fired, cleared int
			for sec := 0; sec <= 300; sec++ {
				for _, a := range tt.at {
					if a == sec {
						f.r.forced++
					}
				}
				f.round(time.Second)
				for _, e := range f.take() {
					if e.Detector != DetectorForcedGC {
						continue
					}
					if e.Firing {
						fired = sec
						if e.Value != 5 {
							t.Fatalf("fired with %v a minute, want 5", e.Value)
						}
					} else {
						cleared = sec
					}
				}
			}
			if fired != tt.fire || cleared != tt.clearFrom {
				t.Fatalf("fired at %ds, cleared at %ds; want %d and %d", fired, cleared, tt.fire, tt.clearFrom)
			}
		})
	}
}

// TestBlockedSource: the RunningFunc is asked at most every runningEvery,
// a panic in it reads as "none runs", and without it the detector is
// silent; the resolving event names the site it resolves.
func TestBlockedSource(t *testing.T) {
	var calls int
	var r Running
	var ok, boom bool
	f := newFed(t, WithFinalizerBlocked(2*time.Second), WithRunning(func() (Running, bool) {
		calls++
		if boom {
			panic("source broke")
		}
		return r, ok
	}))
	r, ok = Running{Kind: "cleanup", Site: "a.go:1", For: 3 * time.Second}, true
	f.round(0)
	evs := f.take()
	if len(evs) != 1 || evs[0].Detector != DetectorFinalizerBlocked || evs[0].Site != "a.go:1" || evs[0].Kind != "cleanup" ||
		evs[0].Value != 3 || evs[0].Threshold != 2 || !evs[0].Since.Equal(f.clk.Now().Add(-3*time.Second)) {
		t.Fatalf("events %+v", evs)
	}
	f.round(time.Millisecond) // too soon to ask again
	if calls != 1 {
		t.Fatalf("asked %d times within runningEvery", calls)
	}
	boom = true
	f.round(runningEvery)
	evs = f.take()
	if calls != 2 || len(evs) != 1 || evs[0].Firing || evs[0].Site != "a.go:1" {
		t.Fatalf("after a panicking source: %d calls, events %+v", calls, evs)
	}

	quiet := newFed(t)
	quiet.round(time.Hour)
	if evs := quiet.take(); len(evs) != 0 {
		t.Fatalf("without a source: %v", eventsString(evs))
	}
}
