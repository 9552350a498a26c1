package finalizerwatch

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/gcprobe/probe/internal/testkit"
)

// gcHarness drives a watcher one GC cycle at a time: the automatic GC is
// off, each step forces exactly one cycle and waits, polling with a
// deadline, until both of the watcher's clocks counted it and every
// finalizer of an object the step dropped has run. Then the step reads the
// ledger once: one observation per cycle.
type gcHarness struct {
	t       *testing.T
	w       *Watcher
	ran     atomic.Int64 // finalizers run
	dropped int64        // objects registered and dropped (or evicted)
	kept    map[string][]*thing
	onRun   func(*thing)
}

func newGCHarness(t *testing.T) *gcHarness {
	t.Helper()
	old := debug.SetGCPercent(-1)
	t.Cleanup(func() { debug.SetGCPercent(old) })
	runtime.GC() // nothing of an earlier test left to collect in our cycles
	h := &gcHarness{t: t, w: newWatcher(t), kept: map[string][]*thing{}}
	h.onRun = func(*thing) { h.ran.Add(1) }
	t.Cleanup(func() { clear(h.kept) })
	return h
}

// The registration sites of the scenarios, one line each.

func (h *gcHarness) keep(name string, n int) {
	for range n {
		o := &thing{}
		switch name {
		case "pool":
			h.w.SetFinalizer(o, h.onRun) // marker: g-pool
		case "burst":
			h.w.SetFinalizer(o, h.onRun) // marker: g-burst
		case "lru":
			h.w.SetFinalizer(o, h.onRun) // marker: g-lru
		case "leak":
			h.w.SetFinalizer(o, h.onRun) // marker: g-leak
		case "fast":
			h.w.SetFinalizer(o, h.onRun) // marker: g-fast
		case "slow":
			h.w.SetFinalizer(o, h.onRun) // marker: g-slow
		default:
			h.t.Fatalf("no site %q", name)
		}
		h.kept[name] = append(h.kept[name], o)
	}
}

func (h *gcHarness) churn(n int) {
	for range n {
		h.w.SetFinalizer(&thing{}, h.onRun) // marker: g-churn
	}
	h.dropped += int64(n)
}

// evict drops the n oldest objects kept under name.
func (h *gcHarness) evict(name string, n int) {
	objs := h.kept[name]
	clear(objs[:n])
	h.kept[name] = objs[n:]
	h.dropped += int64(n)
}

// cycle forces one GC cycle, waits for it to be counted and for the
// dropped objects' finalizers, and returns the ledger's ranking, read once.
func (h *gcHarness) cycle(want uint64) []SiteStats {
	h.t.Helper()
	runtime.GC()
	// testkit.Poll, not AwaitGC: the test counts the cycles it forces.
	testkit.Poll(h.t, 60*time.Second, fmt.Sprintf("both clocks at %d and %d finalizers run", want, h.dropped), func() bool {
		return h.w.cycleCount(KindFinalizer) >= want && h.w.cycleCount(KindCleanup) >= want && h.ran.Load() >= h.dropped
	})
	if c := h.w.cycleCount(KindFinalizer); c != want {
		h.t.Fatalf("clock at %d, want %d: a GC cycle the test did not force", c, want)
	}
	return h.w.top(0)
}

// ranked is one expected place: a site by name and its class.
type ranked struct {
	name  string
	class Class
}

func TestGrowthScenarios(t *testing.T) {
	const cycles = 20
	g, s, c := ClassGrowing, ClassStable, ClassChurn
	tests := []struct {
		name string
		// step makes the registrations of step k (1-based) before its
		// GC cycle.
		step func(h *gcHarness, k int)
		// want is the ranking read after the k-th cycle, for k >= 5.
		want func(k int) []ranked
		// suspects, if set, are the exact suspect counts of some sites
		// after the k-th cycle.
		suspects func(k int) map[string]uint64
	}{{
		name: "stable pool of 8000, leak of 10 per cycle, churn of 2000 per cycle",
		step: func(h *gcHarness, k int) {
			if k == 1 {
				h.keep("pool", 8000)
			}
			h.keep("leak", 10)
			h.churn(2000)
		},
		want: func(int) []ranked { return []ranked{{"leak", g}, {"pool", s}, {"churn", c}} },
		suspects: func(k int) map[string]uint64 {
			// A registration of step j is a suspect from cycle j+2 on.
			return map[string]uint64{"leak": uint64(10 * (k - 2)), "pool": 8000, "churn": 0}
		},
	}, {
		name: "LRU filling to 2000 then flat, leak of 1 per cycle, churn",
		step: func(h *gcHarness, k int) {
			h.keep("lru", 200)
			if k > 10 {
				h.evict("lru", 200) // full: the least recently used go
			}
			h.keep("leak", 1)
			h.churn(2000)
		},
		want: func(k int) []ranked {
			// The LRU's suspects rise until cycle 10 (its registrations
			// of steps 1-8), then stay at 1600: it is growing until two
			// cycles after its last new high.
			if k <= 12 {
				return []ranked{{"lru", g}, {"leak", g}, {"churn", c}}
			}
			return []ranked{{"leak", g}, {"lru", s}, {"churn", c}}
		},
		suspects: func(k int) map[string]uint64 {
			return map[string]uint64{"lru": uint64(200 * min(k-2, 8)), "leak": uint64(k - 2)}
		},
	}, {
		name: "burst of 1000 leaked once, leak of 1 per cycle, churn",
		step: func(h *gcHarness, k int) {
			if k == 1 {
				h.keep("burst", 1000)
			}
			h.keep("leak", 1)
			h.churn(2000)
		},
		want: func(int) []ranked { return []ranked{{"leak", g}, {"burst", s}, {"churn", c}} },
		suspects: func(k int) map[string]uint64 {
			return map[string]uint64{"burst": 1000, "leak": uint64(k - 2)}
		},
	}, {
		// Issue 26, item 3: the leak's suspects fall far below the peak
		// its start-up batch made, then rise again, 5 a cycle; they beat
		// that peak only 200 cycles later.
		name: "leak of 5 per cycle whose start-up batch of 1000 goes at cycle 6, stable pool of 1500, churn",
		step: func(h *gcHarness, k int) {
			if k == 1 {
				h.keep("pool", 1500)
				h.keep("leak", 1000)
			}
			if k == 6 {
				h.evict("leak", 1000) // the batch, registered first
			}
			h.keep("leak", 5)
			h.churn(2000)
		},
		want: func(k int) []ranked {
			switch {
			case k <= 7: // new highs: 1005, 1010, 1015 in cycles 3-5
				return []ranked{{"leak", g}, {"pool", s}, {"churn", c}}
			case k < 6+GrowthRun: // rising since cycle 7, not yet long enough
				return []ranked{{"pool", s}, {"leak", s}, {"churn", c}}
			}
			return []ranked{{"leak", g}, {"pool", s}, {"churn", c}}
		},
		suspects: func(k int) map[string]uint64 {
			if k <= 5 {
				return map[string]uint64{"leak": uint64(1000 + 5*(k-2)), "pool": 1500}
			}
			return map[string]uint64{"leak": uint64(5 * (k - 2)), "pool": 1500}
		},
	}, {
		name: fmt.Sprintf("leak of 1 per cycle beside %d registrations per cycle of churn", heavyChurn),
		step: func(h *gcHarness, k int) {
			h.keep("leak", 1)
			h.churn(heavyChurn)
		},
		want: func(int) []ranked { return []ranked{{"leak", g}, {"churn", c}} },
		suspects: func(k int) map[string]uint64 {
			return map[string]uint64{"leak": uint64(k - 2), "churn": 0}
		},
	}, {
		name: "slow leak of 2 per cycle, then a fast leak of 10 per cycle from cycle 11",
		step: func(h *gcHarness, k int) {
			h.keep("slow", 2)
			if k >= 11 {
				h.keep("fast", 10)
			}
			h.churn(2000)
		},
		want: func(k int) []ranked {
			switch {
			case k <= 10:
				return []ranked{{"slow", g}, {"churn", c}}
			case k <= 12: // outstanding, not yet suspect
				return []ranked{{"slow", g}, {"fast", c}, {"churn", c}}
			case k == 13: // one new high is not yet growth
				return []ranked{{"slow", g}, {"fast", s}, {"churn", c}}
			}
			// Faster first, with fewer suspects than the slow leak
			// until cycle 16.
			return []ranked{{"fast", g}, {"slow", g}, {"churn", c}}
		},
		suspects: func(k int) map[string]uint64 {
			m := map[string]uint64{"slow": uint64(2 * (k - 2))}
			if k >= 13 {
				m["fast"] = uint64(10 * (k - 12))
			}
			return m
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newGCHarness(t)
			names := map[int]string{}
			for _, n := range []string{"pool", "burst", "lru", "leak", "fast", "slow", "churn"} {
				names[testkit.MarkerLine(t, "growth_test.go", "g-"+n)] = n
			}
			for k := 1; k <= cycles; k++ {
				tt.step(h, k)
				top := h.cycle(uint64(k))
				if k == 4 {
					// A leak since the first cycle is growing by the
					// fourth: SuspectCycles+1.
					for _, s := range top {
						if n := names[s.Site.Line]; (n == "leak" || n == "slow") && s.Class != ClassGrowing {
							t.Fatalf("cycle 4: %s is %v, want growing\n%s", n, s.Class, describe(top, names))
						}
					}
				}
				if k < 5 {
					continue
				}
				var got []ranked
				bySite := map[string]SiteStats{}
				for _, s := range top {
					n := names[s.Site.Line]
					if n == "" || !strings.HasSuffix(s.Site.File, "growth_test.go") {
						t.Fatalf("cycle %d: unexpected site %v", k, s.Site)
					}
					got = append(got, ranked{n, s.Class})
					bySite[n] = s
				}
				if want := tt.want(k); !slices.Equal(got, want) {
					t.Fatalf("cycle %d: ranking %v, want %v\n%s", k, got, want, describe(top, names))
				}
				for n, want := range tt.suspects(k) {
					if s := bySite[n]; s.Suspect != want {
						t.Fatalf("cycle %d: %s has %d suspects, want %d\n%s", k, n, s.Suspect, want, describe(top, names))
					}
				}
			}
		})
	}
}

func describe(top []SiteStats, names map[int]string) string {
	var b strings.Builder
	for _, s := range top {
		fmt.Fprintf(&b, "\t%-6s %-7v growth %d suspect %d outstanding %d registered %d survived %v\n",
			names[s.Site.Line], s.Class, s.Growth, s.Suspect, s.Outstanding, s.Registered, s.Survived)
	}
	return b.String()
}

// Read every third cycle, a leak is growing from the second read on and a
// pool filled once is stable.
func TestGrowthWithSparseReads(t *testing.T) {
	h := newGCHarness(t)
	leak := testkit.MarkerLine(t, "growth_test.go", "g-leak")
	pool := testkit.MarkerLine(t, "growth_test.go", "g-pool")
	h.keep("pool", 500)
	for k := 1; k <= 15; k++ {
		h.keep("leak", 1)
		runtime.GC()
		testkit.Poll(t, 60*time.Second, fmt.Sprintf("both clocks at %d", k), func() bool {
			return h.w.cycleCount(KindFinalizer) >= uint64(k) && h.w.cycleCount(KindCleanup) >= uint64(k)
		})
		if k%3 != 0 {
			continue
		}
		sites := h.w.siteList()
		l, _ := siteByLine(sites, leak)
		p, _ := siteByLine(sites, pool)
		// Reads at cycles 3, 6, 9...: the leak has suspects from the
		// first read on, and new highs at every read.
		if wantLeak := ClassGrowing; k >= 6 && l.Class != wantLeak {
			t.Fatalf("cycle %d: leak %v (growth %d, suspects %d), want %v", k, l.Class, l.Growth, l.Suspect, wantLeak)
		}
		if p.Class != ClassStable || p.Suspect != 500 {
			t.Fatalf("cycle %d: pool %v with %d suspects, want stable with 500", k, p.Class, p.Suspect)
		}
	}
}

// A site that registers is observed in every cycle it registers in, read
// or not: a leak read for the first time in cycle 6 is already growing,
// and a pool filled once is stable. A watcher with another SuspectCycles
// learns it at the first read, and starts observing then.
func TestGrowthObservedByRegistrations(t *testing.T) {
	leak := testkit.MarkerLine(t, "growth_test.go", "g-leak")
	pool := testkit.MarkerLine(t, "growth_test.go", "g-pool")
	tests := []struct {
		name string
		opts []Option
		// want is the leak's class at the reads in cycles 6 and 7.
		want [2]Class
	}{
		{"default SuspectCycles", nil, [2]Class{ClassGrowing, ClassGrowing}},
		{"SuspectCycles 2", []Option{WithSuspectCycles(2)}, [2]Class{ClassStable, ClassGrowing}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newGCHarness(t)
			if len(tt.opts) > 0 {
				h.w = newWatcher(t, tt.opts...)
			}
			h.keep("pool", 500)
			for k := uint64(1); k <= 7; k++ {
				h.keep("leak", 1)
				runtime.GC()
				testkit.Poll(t, 60*time.Second, fmt.Sprintf("both clocks at %d", k), func() bool {
					return h.w.cycleCount(KindFinalizer) >= k && h.w.cycleCount(KindCleanup) >= k
				})
				if k < 6 {
					continue // no read
				}
				sites := h.w.siteList()
				l, _ := siteByLine(sites, leak)
				p, _ := siteByLine(sites, pool)
				if want := tt.want[k-6]; l.Class != want {
					t.Fatalf("cycle %d: leak %v (growth %d, suspects %d), want %v", k, l.Class, l.Growth, l.Suspect, want)
				}
				if p.Class != ClassStable {
					t.Fatalf("cycle %d: pool %v, want stable", k, p.Class)
				}
			}
		})
	}
}

func TestMoreCyclesNeeded(t *testing.T) {
	h := newGCHarness(t)
	need := DefaultSuspectCycles + GrowthWindow
	for k := range need + 2 {
		if got, want := h.w.moreCyclesNeeded(), max(need-k, 0); got != want {
			t.Fatalf("after %d cycles: MoreCyclesNeeded() = %d, want %d", k, got, want)
		}
		h.cycle(uint64(k + 1))
	}
}

// The README and the package documentation give the model's memory cost.
func TestGrowthStateSize(t *testing.T) {
	if n := unsafe.Sizeof(growth{}); n != 32 {
		t.Fatalf("growth state is %d bytes; the docs say 32", n)
	}
}

func TestClassString(t *testing.T) {
	for _, tt := range []struct {
		give Class
		want string
	}{{ClassChurn, "churn"}, {ClassStable, "stable"}, {ClassGrowing, "growing"}, {Class(9), "unknown"}} {
		if got := tt.give.String(); got != tt.want {
			t.Errorf("%d.String() = %q, want %q", tt.give, got, tt.want)
		}
	}
}

// The model by itself: observations by cycle, at most one per cycle.
func TestGrowthModel(t *testing.T) {
	type obs struct {
		cycle   uint32
		suspect uint64
	}
	tests := []struct {
		name       string
		give       []obs
		wantClass  Class
		wantGrowth uint64
	}{
		{"nothing", nil, ClassChurn, 0},
		{"one new high is a burst", []obs{{3, 1000}, {4, 1000}}, ClassStable, 1000},
		{"two new highs in four", []obs{{3, 1}, {4, 2}}, ClassGrowing, 2},
		{"a second read in a cycle changes nothing", []obs{{3, 1}, {3, 2}, {3, 5}}, ClassStable, 1},
		{"a read with an older clock changes nothing", []obs{{5, 1}, {4, 2}}, ClassStable, 1},
		{"new highs out of the window", []obs{{3, 1}, {4, 2}, {5, 2}, {6, 2}, {7, 2}, {8, 2}}, ClassStable, 0},
		{"a drop and a recovery is no new high", []obs{{3, 10}, {4, 5}, {5, 10}, {6, 10}}, ClassStable, 10},
		{"sparse reads", []obs{{3, 1}, {30, 40}}, ClassGrowing, 40},
		{"counts saturate", []obs{{3, 1}, {4, 1 << 40}}, ClassGrowing, math.MaxUint32},
		{"a run of rises below an earlier peak", []obs{{1, 1000}, {2, 10}, {3, 11}, {4, 13}, {5, 14}, {6, 20}, {7, 21}, {8, 22}, {9, 23}, {10, 25}}, ClassGrowing, 1 + 1 + 1 + 2},
		{"a run one short", []obs{{1, 1000}, {2, 10}, {3, 11}, {4, 13}, {5, 14}, {6, 20}, {7, 21}, {8, 22}, {9, 23}}, ClassStable, 0},
		{"a run broken by a flat observation", []obs{{1, 1000}, {2, 10}, {3, 11}, {4, 13}, {5, 14}, {6, 20}, {7, 20}, {8, 22}, {9, 23}, {10, 25}}, ClassStable, 0},
		{"clock wraps", []obs{{math.MaxUint32, 1}, {0, 2}}, ClassGrowing, 2},
		{"no suspects now", []obs{{3, 1}, {4, 2}, {5, 0}}, ClassChurn, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g growth
			var last uint64
			for _, o := range tt.give {
				g.observe(o.cycle, o.suspect, &streak{})
				last = o.suspect
			}
			if class, growth := g.classify(last); class != tt.wantClass || growth != tt.wantGrowth {
				t.Errorf("classify(%d) = %v, %d; want %v, %d", last, class, growth, tt.wantClass, tt.wantGrowth)
			}
		})
	}
}

// observation is one read of a site by the growth model: its suspect count
// in a GC cycle.
type observation struct {
	cycle   uint32
	suspect uint64
}

// genPrefix generates an arbitrary history of n observations from cycle
// 1, with gaps between cycles: fills, plateaus, drops and an early peak.
func genPrefix(r *rand.Rand, n int) []observation {
	var h []observation
	cyc := uint32(0)
	v := uint64(0)
	for range n {
		cyc += 1 + uint32(r.IntN(3))
		switch r.IntN(5) {
		case 0:
			v += uint64(r.IntN(2000)) // a burst, a fill
		case 1:
			v -= min(v, uint64(r.IntN(3000))) // a release
		case 2:
			v = uint64(r.IntN(50)) // nearly all released
		default: // flat, or a little noise
			v = v + uint64(r.IntN(3)) - min(v, uint64(r.IntN(3)))
		}
		h = append(h, observation{cyc, v})
	}
	return h
}

// Any history that rises, by at least one suspect per observation, for
// GrowthRun observations is growing from then on while it keeps rising,
// whatever came before: an earlier peak far above it, drops, plateaus,
// sparse observations (issue 26, item 3).
func TestGrowthModelRisingAfterAnyPeak(t *testing.T) {
	r := rand.New(rand.NewPCG(26, 3))
	for n := range 3000 {
		h := genPrefix(r, r.IntN(40))
		var g growth
		for _, o := range h {
			g.observe(o.cycle, o.suspect, &streak{})
		}
		var cyc uint32
		var v uint64
		if len(h) > 0 {
			cyc, v = h[len(h)-1].cycle, h[len(h)-1].suspect
		}
		rises := GrowthRun + r.IntN(20)
		for j := 1; j <= rises; j++ {
			cyc += 1 + uint32(r.IntN(3))
			v += 1 + uint64(r.IntN(4)*r.IntN(10))
			g.observe(cyc, v, &streak{})
			h = append(h, observation{cyc, v})
			class, grown := g.classify(v)
			if j >= GrowthRun && (class != ClassGrowing || grown < GrowthWindow) {
				t.Fatalf("history %d, rise %d of %d: %v with growth %d, want growing with at least %d\n%v", n, j, rises, class, grown, GrowthWindow, h)
			}
		}
	}
}

// A pool or a cache that stopped filling is stable once GrowthWindow
// observations have passed since its last new high, however its count
// wavers below that high: noise of a few suspects, or dips refilled in
// fewer than GrowthRun observations.
func TestGrowthModelStablePoolStaysStable(t *testing.T) {
	r := rand.New(rand.NewPCG(26, 4))
	for n := range 3000 {
		var g growth
		var h []observation
		cyc := uint32(0)
		level := uint64(6 + r.IntN(5000))
		// Filling up to level, in any number of steps.
		for v := uint64(0); v < level; {
			v = min(level, v+1+uint64(r.IntN(int(level))))
			cyc++
			h = append(h, observation{cyc, v})
		}
		filled := len(h)
		noise := n%2 == 0
		for len(h) < filled+200 {
			if noise {
				// At most six values: no run of GrowthRun rises.
				cyc++
				h = append(h, observation{cyc, level - uint64(r.IntN(6))})
				continue
			}
			// A dip, refilled in fewer than GrowthRun observations, then
			// a flat observation at the level.
			low := level - uint64(r.IntN(int(level)))
			steps := 1 + r.IntN(GrowthRun-1)
			for j := range steps {
				cyc++
				h = append(h, observation{cyc, low + (level-low)*uint64(j)/uint64(steps)})
			}
			for range 1 + r.IntN(5) {
				cyc++
				h = append(h, observation{cyc, level})
			}
		}
		for i, o := range h {
			g.observe(o.cycle, o.suspect, &streak{})
			if i < filled-1+GrowthWindow {
				continue
			}
			if class, _ := g.classify(o.suspect); o.suspect > 0 && class != ClassStable {
				t.Fatalf("pool %d (level %d), observation %d: %v, want stable\n%v", n, level, i, class, h[:i+1])
			}
		}
	}
}
