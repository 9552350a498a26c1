package probe

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/gcprobe/probe/heapprofile"
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
// logs the causes named and gone.
func (o *operatorCauses) judge(sn heapprofile.Snapshot, now time.Time, l *slog.Logger) {
	if !o.on || sn.Status != heapprofile.StatusOK {
		return
	}
	env := o.env
	env.Running = now.Sub(o.start)
	judged := heapprofile.JudgeOperator(sn, env)
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range judged {
		n := o.named[c.Name]
		if n == nil {
			n = &namedOperator{since: now}
			o.named[c.Name] = n
			logOperator(l, c, true)
		}
		n.cause, n.seen = c, now
	}
	for name, n := range o.named {
		if now.Sub(n.seen) >= operatorHold {
			delete(o.named, name)
			logOperator(l, n.cause, false)
		}
	}
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
		dst = append(dst, Cause{Operator: true, Name: c.Name, Words: c.Words, Fix: c.Fix, Line: c.Site,
			Value: c.Value, Threshold: c.Threshold, Since: n.since})
	}
	return dst
}

// operatorOrder is the order the operator causes are shown in.
var operatorOrder = [...]string{
	heapprofile.CauseManagedFieldsCached, heapprofile.CauseCacheNoTransform, heapprofile.CauseCacheDeepCopy,
	heapprofile.CauseRelistStorm, heapprofile.CauseGOMEMLIMITUnset,
}

// logOperator logs an operator cause named or gone, at Warn, as the
// detector events are.
func logOperator(l *slog.Logger, c heapprofile.OperatorCause, named bool) {
	msg := "gcprobe: detector cleared"
	if named {
		msg = "gcprobe: detector firing"
	}
	attrs := []slog.Attr{
		slog.String("detector", c.Name),
		slog.Float64("value", c.Value),
		slog.Float64("threshold", c.Threshold),
	}
	if named {
		attrs = append(attrs, slog.String("cause", c.Words), slog.String("fix", c.Fix))
		if c.Site != (stackcapture.Frame{}) {
			attrs = append(attrs, slog.String("line", c.Site.Label()))
		}
	}
	l.LogAttrs(context.Background(), slog.LevelWarn, msg, attrs...)
}
