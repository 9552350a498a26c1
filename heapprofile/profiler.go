package heapprofile

import (
	"math"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/gcprobe/probe/internal/lifecycle"
	"github.com/gcprobe/probe/stackcapture"
)

// Errors wrapped by Start; the same values as the other gcprobe packages',
// so errors.Is works with any of them.
var (
	// ErrRunning is wrapped by Start's error while the profiler runs.
	ErrRunning = lifecycle.ErrRunning
	// ErrStopped is wrapped by Start's error after Stop.
	ErrStopped = lifecycle.ErrStopped
)

// Site is one call site of the heap profile: the first frame in the
// user's or a dependency's code of the stacks that allocated there (else
// their first frame outside the runtime, else RuntimeSite; see the
// package documentation), with what they allocated over the latest window
// and hold now. Bytes and objects are the runtime's samples scaled up as
// pprof scales them: estimates (see the package documentation).
type Site struct {
	// Frame is the site. Its Label is the site label gcprobe uses
	// everywhere ("function file:line").
	Frame stackcapture.Frame
	// Stack is a stack through the site (see Path for which), from the
	// site outward: the site first, then its callers.
	Stack []stackcapture.Frame
	// Path is the way from the site down to the allocation on that same
	// stack: the frames between the site and the allocation that are
	// outside the runtime, innermost last, so that its last frame is
	// where the allocation happened ("io.copyBuffer" below a site that
	// calls io.Copy). Empty when the site's own line allocated (through
	// the runtime only). PathString renders it on one line.
	//
	// Two stacks that reach one site line by different paths are one
	// site, with one Stack and one Path: those of the stack that
	// allocated most through the line in the window in which the site
	// was first reported (the first stack seen through it if none
	// allocated then), kept from then on, so that a site's path does not
	// change from one report to the next.
	Path []stackcapture.Frame
	// AllocBytes and AllocObjects are what the site allocated over the
	// latest window.
	AllocBytes, AllocObjects int64
	// AllocBytesPerSecond is AllocBytes over the window's length.
	AllocBytesPerSecond float64
	// InUseBytes and InUseObjects are what the site's allocations hold
	// now (as of the latest GC cycle).
	InUseBytes, InUseObjects int64
	// GrowthBytes is how much InUseBytes changed over the latest window.
	GrowthBytes int64
	// GrowingFor is how many consecutive windows InUseBytes has grown.
	GrowingFor int
	// GrownBytes is how much InUseBytes grew over those windows.
	GrownBytes int64
}

// Label returns the site as "function file:line", bounded and safe for a
// metric label or a span attribute; the runtime's site as RuntimeSite.
func (s *Site) Label() string {
	if s.Frame == runtimeSiteFrame {
		return RuntimeSite
	}
	return s.Frame.Label()
}

// Snapshot is the profiler's picture after its latest read.
type Snapshot struct {
	// Time is when the latest read ran; zero before the first.
	Time time.Time
	// Window is the time between the two latest reads, which the
	// allocation figures cover; zero after the first read, which only
	// sets the baseline.
	Window time.Duration
	// Status says whether the latest read named the allocating lines
	// (StatusOK), or why not: the profile is off (StatusOff) or has more
	// buckets than the bound (StatusOverflow). The lists are empty unless
	// it is StatusOK. StatusText says it in a sentence.
	Status Status
	// Rate is runtime.MemProfileRate at the latest read; 0 means the
	// runtime records no profile (StatusOff).
	Rate int
	// Buckets is how many stacks the runtime's profile held, and Sites
	// how many sites they make.
	Buckets, Sites int
	// Bound is the bucket bound of the latest read: WithMaxBuckets, or
	// more once an overflow raised it; Ceiling is as far as it can be
	// raised, BoundCeiling times WithMaxBuckets.
	Bound, Ceiling int
	// Reads counts the reads, Skipped those not made because the profile
	// had more buckets than the bound.
	Reads, Skipped uint64
	// Unchanged counts the reads skipped because no GC cycle had ended
	// since the previous one (see Sample).
	Unchanged uint64
	// ReadDuration is how long the latest read took (wall time).
	ReadDuration time.Duration
	// Allocating are the sites that allocated most over the window, most
	// first, at most WithTopK of them.
	Allocating []Site
	// Growing are the sites whose in-use bytes grew over the latest
	// WithGrowing windows by at least its bytes, most grown first, at
	// most WithTopK of them.
	Growing []Site
	// Signatures are the figures of WithSignatures' signatures, in its
	// order; empty without signatures, and unless Status is StatusOK.
	Signatures []SignatureStat
	// TotalAllocBytes is what the whole profile allocated over the
	// window, TotalInUseBytes what it holds now (scaled): the
	// denominators of the signatures' shares.
	TotalAllocBytes, TotalInUseBytes int64
}

// bucket is one stack of the runtime's profile across reads.
type bucket struct {
	allocBytes, allocObjs int64 // cumulative, raw, at the previous read
	site                  int32
	// sigs is the signatures the stack matches, a bit each; its
	// matches' lines (slots) are p.sigArena[sigAt:], one a bit, in
	// order of the bits. Found when the stack is first seen.
	sigs  uint32
	sigAt int32
}

// siteState is one site across reads.
type siteState struct {
	frame stackcapture.Frame
	pcs   []uintptr            // the first stack seen, whole; the heaviest once reported
	at    int                  // the index in pcs of the site's PC; -1 for RuntimeSite
	stack []stackcapture.Frame // symbolized on first report
	path  []stackcapture.Frame // symbolized with stack

	heavy    int32 // the index in p.records of the bucket that allocated most in this window
	heavyWin int64 // and what it allocated; 0 if none did

	winBytes, winObjs     int64 // this window, scaled
	totBytes, totObjs     int64 // every window so far, scaled: what Mark copies
	inuseBytes, inuseObjs int64 // now, scaled
	prevInuse             int64
	growth                int64
	grewFor               int
	grownFrom             int64
}

// Profiler reads the runtime's heap profile by deltas. Create it with New.
type Profiler struct {
	cfg config

	// mu guards a read and everything it writes; the record slice and
	// the tables are reused from one read to the next.
	mu        sync.Mutex
	records   []runtime.MemProfileRecord
	buckets   map[uint64]*bucket
	sites     []*siteState
	byLabel   map[string]int32
	topA      []int32 // reused top lists, site indices
	topG      []int32
	snap      Snapshot
	last      time.Time
	firstRead time.Time                                    // when the first read ran: the zero Mark's time
	read      func([]runtime.MemProfileRecord) (int, bool) // runtime.MemProfile, or a test's
	rate      func() int                                   // runtime.MemProfileRate, or a test's
	bound     int                                          // the bucket bound, raised on overflow
	cycles    func() uint64                                // GC cycles completed; a test's in tests
	cycle     uint64                                       // at the latest read
	cycleS    []metrics.Sample

	// WithSignatures' state (signatures.go), under mu.
	mainPath  string
	sigAccs   []sigAcc
	sigSlots  []sigSlot
	slotByKey map[sigSlotKey]int32
	sigArena  []int32
	frameBuf  []stackcapture.Frame

	life lifecycle.Lifecycle
}

// New returns a Profiler configured by opts. It reads nothing until
// Sample, Start or Run.
func New(opts ...Option) (*Profiler, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, optionErr("New", "nil Option")
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	p := &Profiler{
		cfg:     cfg,
		buckets: make(map[uint64]*bucket),
		byLabel: make(map[string]int32),
		read:    func(r []runtime.MemProfileRecord) (int, bool) { return runtime.MemProfile(r, true) },
		rate:    func() int { return runtime.MemProfileRate },
		bound:   cfg.maxBuckets,
		cycleS:  []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}},
	}
	p.cycles = p.readCycles
	if len(cfg.sigs) > 0 {
		p.mainPath = mainModule()
		p.sigAccs = make([]sigAcc, len(cfg.sigs))
		p.slotByKey = make(map[sigSlotKey]int32)
	}
	p.life.Name = "heapprofile: Profiler"
	return p, nil
}

// Start reads the profile now and then every WithInterval in a goroutine of
// its own, until Stop. A profiler runs once: Start returns an error
// wrapping ErrRunning if it runs, ErrStopped once stopped.
func (p *Profiler) Start() error {
	return p.life.Start(func() error {
		done := p.life.Done()
		p.life.Go(func() {
			t := time.NewTicker(p.cfg.interval)
			defer t.Stop()
			p.Sample()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					p.Sample()
				}
			}
		})
		return nil
	}, nil)
}

// Stop stops the reads and waits for the goroutine; idempotent. Sample and
// Snapshot keep working.
func (p *Profiler) Stop() { _ = p.life.Stop(nil) }

// readCycles returns the GC cycles completed so far.
func (p *Profiler) readCycles() uint64 {
	metrics.Read(p.cycleS)
	if p.cycleS[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return p.cycleS[0].Value.Uint64()
}

// Sample reads the profile once, synchronously, and updates the snapshot.
// The first read only sets the baseline of the allocation figures. The
// runtime publishes the profile at the end of each GC cycle, so with no
// cycle since the previous read there is nothing new: Sample then changes
// nothing, and the window extends to the next read that has a cycle (a
// window without one would read as no allocation and no growth).
func (p *Profiler) Sample() {
	p.mu.Lock()
	defer p.mu.Unlock()
	start := time.Now()
	now := p.cfg.now()
	sn := &p.snap
	sn.Rate = p.rate()
	sn.Ceiling = BoundCeiling * p.cfg.maxBuckets
	if sn.Rate == 0 {
		// The runtime records nothing: say so rather than show the
		// last window's lists, or empty ones, as what allocates now.
		sn.Status = StatusOff
		p.clearLists()
		return
	}
	cycle := p.cycles()
	if sn.Reads > 0 && cycle == p.cycle {
		sn.Unchanged++
		return
	}
	sn.Bound = p.bound
	if n, ok := p.fill(); !ok {
		// Too big to read at this bound. The deltas are cumulative
		// counts, so nothing is lost: the next read that fits covers
		// this window too. Raising the bound is what lets it fit.
		sn.Skipped++
		sn.Status, sn.Buckets = StatusOverflow, n
		p.clearLists()
		p.bound = raise(p.bound, n, sn.Ceiling)
		return
	}
	first := sn.Reads == 0
	sn.Reads++
	sn.Status = StatusOK
	p.cycle = cycle
	sn.Buckets = len(p.records)
	if first {
		sn.Window = 0
	} else {
		sn.Window = now.Sub(p.last)
	}
	p.last, sn.Time = now, now
	if first {
		p.firstRead = now
	}

	for _, s := range p.sites {
		s.winBytes, s.winObjs, s.inuseBytes, s.inuseObjs = 0, 0, 0, 0
		s.heavyWin = 0
	}
	p.resetSignatures()
	sn.TotalAllocBytes, sn.TotalInUseBytes = 0, 0
	for i := range p.records {
		r := &p.records[i]
		b := p.bucketOf(r)
		f := scale(r.AllocObjects, r.AllocBytes, sn.Rate)
		s := p.sites[b.site]
		var win, winObjs int64
		if !first {
			win = int64(float64(r.AllocBytes-b.allocBytes) * f)
			winObjs = int64(float64(r.AllocObjects-b.allocObjs) * f)
		}
		inuse := int64(float64(r.InUseBytes()) * f)
		s.winBytes += win
		s.winObjs += winObjs
		s.totBytes += win
		s.totObjs += winObjs
		if win > s.heavyWin {
			s.heavy, s.heavyWin = int32(i), win
		}
		s.inuseBytes += inuse
		s.inuseObjs += int64(float64(r.InUseObjects()) * f)
		sn.TotalAllocBytes += win
		sn.TotalInUseBytes += inuse
		if b.sigs != 0 {
			p.addSignatures(b, win, inuse)
		}
		b.allocBytes, b.allocObjs = r.AllocBytes, r.AllocObjects
	}
	for _, s := range p.sites {
		s.growth = s.inuseBytes - s.prevInuse
		switch {
		case first:
			s.grewFor, s.grownFrom = 0, s.inuseBytes
		case s.growth > 0:
			s.grewFor++
		default:
			s.grewFor, s.grownFrom = 0, s.inuseBytes
		}
		s.prevInuse = s.inuseBytes
	}
	sn.Sites = len(p.sites)
	p.rank(first)
	p.renderSignatures()
	sn.ReadDuration = time.Since(start)
}

// fill reads the runtime's profile into p.records, growing the slice up to
// the bucket bound, and returns the profile's buckets; false when they are
// more than the bound.
func (p *Profiler) fill() (int, bool) {
	for {
		n, ok := p.read(p.records[:cap(p.records)])
		if ok {
			p.records = p.records[:n]
			return n, true
		}
		if n > p.bound {
			return n, false
		}
		// Room for the buckets added while we grow.
		p.records = make([]runtime.MemProfileRecord, 0, min(n+n/8+16, p.bound))
	}
}

// bucketOf returns r's bucket, making it (and its site) on first sight. The
// runtime keeps a record per stack and object size (runtime/mprof.go,
// stkbucket's size argument), so a line that allocates objects of several
// sizes (make([]byte, n), append) has as many records with one stack: the
// key is the stack and the size, or their cumulative counts would
// overwrite one another and the window's figures come out wrong, even
// negative.
func (p *Profiler) bucketOf(r *runtime.MemProfileRecord) *bucket {
	stk := r.Stack()
	h := stackcapture.HashPCs(stk)
	if r.AllocObjects > 0 {
		h ^= uint64(r.AllocBytes/r.AllocObjects) * 0x9E3779B97F4A7C15 // every record of a bucket has one size
	}
	if b := p.buckets[h]; b != nil {
		return b
	}
	// A new stack: the runtime's buckets are never freed, so the map
	// grows with the profile, which fill bounds.
	b := &bucket{site: p.siteOf(stk)}
	if len(p.cfg.sigs) > 0 {
		p.matchSignatures(stk, b)
	}
	p.buckets[h] = b
	return b
}

// scale returns the factor that turns a stack's sampled counts into
// estimates of what was allocated, as pprof does: the runtime picks an
// object of size s with probability 1 - exp(-s/rate).
func scale(objs, bytes int64, rate int) float64 {
	if objs <= 0 || bytes <= 0 || rate <= 1 {
		return 1
	}
	avg := float64(bytes) / float64(objs)
	return 1 / (1 - math.Exp(-avg/float64(rate)))
}

// rank fills the snapshot's top lists.
func (p *Profiler) rank(first bool) {
	k := p.cfg.topK
	p.topA, p.topG = p.topA[:0], p.topG[:0]
	for i, s := range p.sites {
		if !first && s.winBytes > 0 {
			p.topA = insertTop(p.topA, int32(i), k, func(a, b int32) bool { return p.sites[a].winBytes > p.sites[b].winBytes })
		}
		if s.grewFor >= p.cfg.growingWindows && s.inuseBytes-s.grownFrom >= p.cfg.growingBytes {
			p.topG = insertTop(p.topG, int32(i), k, func(a, b int32) bool {
				return p.sites[a].inuseBytes-p.sites[a].grownFrom > p.sites[b].inuseBytes-p.sites[b].grownFrom
			})
		}
	}
	sn := &p.snap
	sn.Allocating = p.render(sn.Allocating[:0], p.topA)
	sn.Growing = p.render(sn.Growing[:0], p.topG)
}

// insertTop inserts i into top, kept sorted by better and at most k long.
func insertTop(top []int32, i int32, k int, better func(a, b int32) bool) []int32 {
	j := len(top)
	for j > 0 && better(i, top[j-1]) {
		j--
	}
	if j >= k {
		return top
	}
	if len(top) < k {
		top = append(top, 0)
	}
	copy(top[j+1:], top[j:len(top)-1])
	top[j] = i
	return top
}

// render appends the sites of idx to dst, symbolizing a site's stack the
// first time it is reported.
func (p *Profiler) render(dst []Site, idx []int32) []Site {
	sec := p.snap.Window.Seconds()
	for _, i := range idx {
		s := p.sites[i]
		if s.stack == nil {
			p.heaviestStack(s)
			s.stack, s.path = symbolize(s)
		}
		st := Site{
			Frame: s.frame, Stack: s.stack, Path: s.path,
			AllocBytes: s.winBytes, AllocObjects: s.winObjs,
			InUseBytes: s.inuseBytes, InUseObjects: s.inuseObjs,
			GrowthBytes: s.growth, GrowingFor: s.grewFor, GrownBytes: s.inuseBytes - s.grownFrom,
		}
		if sec > 0 {
			st.AllocBytesPerSecond = float64(s.winBytes) / sec
		}
		dst = append(dst, st)
	}
	return dst
}

// Snapshot returns the latest read's picture. Its lists are the caller's;
// each Site's Stack and Path are shared with the profiler and later
// snapshots, and must not be changed.
func (p *Profiler) Snapshot() Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	sn := p.snap
	sn.Allocating = append([]Site(nil), p.snap.Allocating...)
	sn.Growing = append([]Site(nil), p.snap.Growing...)
	sn.Signatures = append([]SignatureStat(nil), p.snap.Signatures...)
	return sn
}

// Mark is the profiler's allocation totals at one read, per site: the
// start of a window of the caller's choosing, which Since ends. The zero
// Mark is the profiler's first read.
type Mark struct {
	time  time.Time
	reads uint64
	tot   []markTotal // by site index; sites made later are missing
}

type markTotal struct{ bytes, objs int64 }

// Time returns the time of the read the mark was taken at; zero before
// the first read.
func (m Mark) Time() time.Time { return m.time }

// Mark returns the totals of the latest read, for Since: the start of a
// window that is the caller's rather than the profiler's own (a profile
// over the N seconds a client asks for). It copies two numbers per site,
// and nothing else; taking no mark costs nothing.
func (p *Profiler) Mark() Mark {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := Mark{time: p.snap.Time, reads: p.snap.Reads, tot: make([]markTotal, len(p.sites))}
	for i, s := range p.sites {
		m.tot[i] = markTotal{s.totBytes, s.totObjs}
	}
	return m
}

// Since returns the latest read's picture with its allocation figures
// taken over the window from m to the latest read rather than over the
// profiler's own latest window: Window is the time between the two
// reads, Allocating the sites that allocated most since m (at most
// WithTopK, most first), each Site's AllocBytes and AllocObjects what it
// allocated since m (AllocBytesPerSecond over that window). The in-use
// figures, the growth and Growing are the latest read's, as in Snapshot:
// they are states, not counts. A site first seen after m counts from zero
// (the first read that sees its stack counts all of the stack's history,
// as Snapshot does). With no read since m, or none at all, the lists have
// no allocation: Window is 0. Signatures are those of Snapshot.
func (p *Profiler) Since(m Mark) Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	sn := p.snap
	sn.Growing = append([]Site(nil), p.snap.Growing...)
	sn.Signatures = append([]SignatureStat(nil), p.snap.Signatures...)
	sn.Allocating = nil
	sn.Window = 0
	if sn.Status != StatusOK || sn.Reads == 0 || sn.Reads == m.reads {
		return sn
	}
	if m.reads > 0 {
		sn.Window = sn.Time.Sub(m.time)
	} else {
		sn.Window = sn.Time.Sub(p.firstRead)
	}
	since := func(i int32) markTotal {
		s := p.sites[i]
		t := markTotal{s.totBytes, s.totObjs}
		if int(i) < len(m.tot) {
			t.bytes -= m.tot[i].bytes
			t.objs -= m.tot[i].objs
		}
		return t
	}
	var top []int32
	for i := range p.sites {
		if since(int32(i)).bytes > 0 {
			top = insertTop(top, int32(i), p.cfg.topK, func(a, b int32) bool { return since(a).bytes > since(b).bytes })
		}
	}
	sec := sn.Window.Seconds()
	sn.Allocating = p.render(nil, top)
	for k, i := range top {
		t := since(i)
		st := &sn.Allocating[k]
		st.AllocBytes, st.AllocObjects, st.AllocBytesPerSecond = t.bytes, t.objs, 0
		if sec > 0 {
			st.AllocBytesPerSecond = float64(t.bytes) / sec
		}
	}
	return sn
}

// Interval returns the configured read interval (WithInterval).
func (p *Profiler) Interval() time.Duration { return p.cfg.interval }
