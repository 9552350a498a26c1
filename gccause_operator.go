package probe

import (
	"cmp"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/internal/logs"
	"github.com/gcprobe/probe/stackcapture"
)

// An operator's own causes of GC work (heapprofile.JudgeOperator): in a
// binary that links client-go or controller-runtime, the heap profile sums
// the allocations of its stack signatures, and each read is judged. A
// judgement covers one read's window, so a cause, once named, stays named
// until a minute has passed without it (memstats' causes move so too), and
// it is logged once when named and once when it goes.

// operatorHold is how long an operator cause stays named after the
// latest read that judged it.
const operatorHold = time.Minute

// operatorCauses is the probe's state of the operator causes.
type operatorCauses struct {
	on    bool // the binary links Kubernetes' libraries
	env   heapprofile.OperatorEnv
	start time.Time

	mu    sync.Mutex
	named map[string]*namedOperator
}

// namedOperator is an operator cause named now, with the latest judgement
// that named it.
type namedOperator struct {
	cause       heapprofile.OperatorCause
	since, seen time.Time
}

// newOperatorCauses reads, once, whether the binary links Kubernetes'
// libraries and what the environment's memory limits are.
func newOperatorCauses() *operatorCauses {
	o := &operatorCauses{on: heapprofile.LinksKubernetes(), start: time.Now(), named: make(map[string]*namedOperator)}
	if o.on {
		o.env = heapprofile.ReadOperatorEnv()
	}
	return o
}

// options are the heap profiler's options the causes need: the operator
// signatures, in a binary that links Kubernetes' libraries.
func (o *operatorCauses) options() []heapprofile.Option {
	if !o.on {
		return nil
	}
	return []heapprofile.Option{heapprofile.WithSignatures(heapprofile.OperatorSignatures()...)}
}

// judge judges the heap profile's latest read, updates what is named, and
// logs the causes named and gone. A read that is not usable (the profile
// off, or over its bound) judges only what needs no profile
// (gomemlimit_unset); a cause not judged for a minute goes all the same.
// The memory limit is read anew each time: the fix says to set it.
func (o *operatorCauses) judge(sn heapprofile.Snapshot, now time.Time, l *slog.Logger) {
	if !o.on {
		return
	}
	env := o.env
	env.Running = now.Sub(o.start)
	env.MemoryLimit = debug.SetMemoryLimit(-1)
	if sn.Status != heapprofile.StatusOK {
		sn = heapprofile.Snapshot{}
	}
	judged := heapprofile.JudgeOperator(sn, env)
	type change struct {
		cause heapprofile.OperatorCause
		named bool
	}
	var changes []change
	o.mu.Lock()
	for _, c := range judged {
		n := o.named[c.Name]
		if n == nil {
			n = &namedOperator{since: now}
			o.named[c.Name] = n
			changes = append(changes, change{c, true})
		}
		n.cause, n.seen = c, now
	}
	for name, n := range o.named {
		if now.Sub(n.seen) >= operatorHold {
			delete(o.named, name)
			changes = append(changes, change{n.cause, false})
		}
	}
	o.mu.Unlock()
	// The logger is the user's: called outside the lock, so that a slow
	// handler holds up no Report, and one that asks for a Report does
	// not deadlock.
	for _, ch := range changes {
		logs.Operator(l, ch.cause, ch.named)
	}
}

// names appends the names of the causes named now.
func (o *operatorCauses) names(dst []string) []string {
	if !o.on {
		return dst
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, name := range operatorOrder {
		if o.named[name] != nil {
			dst = append(dst, name)
		}
	}
	return dst
}

// causes appends the causes named now, in a stable order.
func (o *operatorCauses) causes(dst []Cause) []Cause {
	if !o.on {
		return dst
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, name := range operatorOrder {
		n := o.named[name]
		if n == nil {
			continue
		}
		c := n.cause
		// The Report names the line on a line of its own.
		words := strings.TrimSuffix(c.Words, " at "+c.Site.Label())
		dst = append(dst, Cause{Operator: true, Name: c.Name, Words: words, Fix: c.Fix, Line: c.Site,
			Value: c.Value, Threshold: c.Threshold, Since: n.since})
	}
	return dst
}

// operatorOrder is the order the operator causes are shown in.
var operatorOrder = [...]string{
	heapprofile.CauseManagedFieldsCached, heapprofile.CauseCacheNoTransform, heapprofile.CauseCacheDeepCopy,
	heapprofile.CauseRelistStorm, heapprofile.CauseGOMEMLIMITUnset,
}

// recentForced ranks the lines that forced GC cycles by their calls over
// the latest minute or two rather than since the process began: a line
// that forced many cycles at start-up is not the one to name while a loop
// elsewhere forces them now. It keeps the counts as they were a generation
// ago (at least forcedGeneration old, at most twice that).
type recentForced struct {
	mu        sync.Mutex
	at        time.Time                     // when cur was taken
	cur, prev map[stackcapture.Frame]uint64 // counts then, and a generation before
	prevAt    time.Time
}

// forcedGeneration is how often recentForced takes its counts.
const forcedGeneration = time.Minute

// rank returns sites with Calls made the calls since the older generation,
// most first, those with none left out, and since when they count (zero
// when every call since the process began counts).
func (r *recentForced) rank(sites []finalizerwatch.ForcedGCSite, now time.Time) ([]finalizerwatch.ForcedGCSite, time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur == nil || now.Sub(r.at) >= forcedGeneration {
		r.prev, r.prevAt = r.cur, r.at
		r.cur, r.at = make(map[stackcapture.Frame]uint64, len(sites)), now
		for _, s := range sites {
			r.cur[s.Site] = s.Calls
		}
	}
	out := sites[:0:0]
	for _, s := range sites {
		s.Calls -= min(r.prev[s.Site], s.Calls) // a nil map reads 0
		if s.Calls > 0 {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b finalizerwatch.ForcedGCSite) int { return cmp.Compare(b.Calls, a.Calls) })
	return out, r.prevAt
}
