package heapprofile

import (
	"fmt"
	"math"
	"time"

	"github.com/gcprobe/probe/stackcapture"
)

// A Kubernetes operator's own GC causes. An operator built on client-go
// and controller-runtime makes the GC work hard in a few well-known ways:
// its informer cache keeps every object's managedFields, or a big kind
// whole; its reconcilers read the cache through deep copies; its
// reflectors relist. Each leaves its mark on the heap profile's stacks,
// which OperatorSignatures names by function (as strings: this package
// imports neither module), and JudgeOperator turns a Snapshot's
// SignatureStats into causes, each with the number that decided it and
// the fix by its API name. docs/gc-cause.md has the measurements behind
// the thresholds.

// Names of OperatorSignatures' signatures: SignatureStat.Name.
const (
	// SignatureManagedFields: managedFields decoded from protobuf, what
	// client-go and controller-runtime use for built-in kinds.
	SignatureManagedFields = "k8s_managed_fields"
	// SignatureManagedFieldsJSON: managedFields' field sets decoded
	// from JSON (custom resources with typed Go structs).
	SignatureManagedFieldsJSON = "k8s_managed_fields_json"
	// SignaturePodDecode and SignatureSecretDecode: Pods and Secrets
	// decoded, the big kinds an operator most often caches whole.
	SignaturePodDecode    = "k8s_pod_decode"
	SignatureSecretDecode = "k8s_secret_decode"
	// SignatureCacheDeepCopy: deep copies under controller-runtime's
	// cache reader, one per object a Get or List returns.
	SignatureCacheDeepCopy = "k8s_cache_deep_copy"
	// SignatureReflectorList: a reflector's paged list (client-go's
	// fallback when the server does not stream the list).
	SignatureReflectorList = "k8s_reflector_list"
	// SignatureWatchDecode: objects decoded from a watch stream, where
	// client-go's streaming list (WatchListClient, on by default since
	// 1.35) decodes the initial and every re-list too.
	SignatureWatchDecode = "k8s_watch_decode"
)

// OperatorSignatures returns the stack signatures JudgeOperator reads,
// for WithSignatures. Each is named by a Signature* constant; the frames
// are substrings of the function names client-go v0.37 and
// controller-runtime v0.25 give them (examples/operator measures them).
// The slice is the caller's.
func OperatorSignatures() []Signature {
	return []Signature{
		{Name: SignatureManagedFields, Frames: []string{"k8s.io/apimachinery/pkg/apis/meta/v1.(*ManagedFieldsEntry).Unmarshal"}},
		{Name: SignatureManagedFieldsJSON, Frames: []string{"k8s.io/apimachinery/pkg/apis/meta/v1.(*FieldsV1).UnmarshalJSON"}},
		{Name: SignaturePodDecode, Frames: []string{"k8s.io/api/core/v1.(*Pod).Unmarshal"}},
		{Name: SignatureSecretDecode, Frames: []string{"k8s.io/api/core/v1.(*Secret).Unmarshal"}},
		// An allocation in a generated DeepCopy, DeepCopyInto or
		// DeepCopyObject, called from the cache reader's Get or List.
		{Name: SignatureCacheDeepCopy, Frames: []string{"DeepCopy", "sigs.k8s.io/controller-runtime/pkg/cache/internal.(*CacheReader)."}},
		{Name: SignatureReflectorList, Frames: []string{"k8s.io/client-go/tools/cache.(*Reflector).list"}},
		{Name: SignatureWatchDecode, Frames: []string{"k8s.io/apimachinery/pkg/watch.(*StreamWatcher).receive"}},
	}
}

// Names of the causes JudgeOperator finds: OperatorCause.Name, bounded,
// stable, for a metric label.
const (
	// CauseManagedFieldsCached: the cache keeps managedFields.
	CauseManagedFieldsCached = "managed_fields_cached"
	// CauseCacheNoTransform: a big kind is cached whole.
	CauseCacheNoTransform = "cache_no_transform"
	// CauseCacheDeepCopy: reconcilers read the cache through deep copies.
	CauseCacheDeepCopy = "cache_deep_copy"
	// CauseRelistStorm: the reflectors list (or stream lists) again and
	// again.
	CauseRelistStorm = "relist_storm"
	// CauseGOMEMLIMITUnset: a memory limit on the container, none on the
	// Go runtime.
	CauseGOMEMLIMITUnset = "gomemlimit_unset"
)

// Thresholds of JudgeOperator. Each sits far from both sides of what was
// measured with the cause and without it (docs/gc-cause.md), so that a
// figure that wobbles from one window to the next does not cross it: a
// cause appears and goes only when the program changes.
const (
	// OperatorManagedFieldsShare: managedFields hold at least this share
	// of the bytes in use. Measured: 17-27% (examples/operator), 30-40%
	// (controller-runtime's maintainers); 0% with the transform.
	OperatorManagedFieldsShare = 0.10
	// OperatorKindShare: decoded Pods (or Secrets) hold at least this
	// share of the bytes in use. The maintainers measured (*Pod).Unmarshal
	// at 37%.
	OperatorKindShare = 0.25
	// OperatorDeepCopyShare: cache-read deep copies are at least this
	// share of the bytes allocated over the window. Measured: 97%; 0%
	// with client.UnsafeDisableDeepCopy.
	OperatorDeepCopyShare = 0.25
	// OperatorRelistShare: lists and watch decoding are at least this
	// share of the bytes allocated over the window, past OperatorWarmup.
	// Measured: 52% of the window of a cache's first list, about 0% after.
	OperatorRelistShare = 0.25
	// OperatorMinRate floors the causes judged by allocation: below
	// 1 MiB/s nothing makes the GC work hard, whatever its share.
	OperatorMinRate = 1 << 20
	// OperatorMinInUse floors the causes judged by bytes in use: a share
	// of a heap of a few MiB is no cause.
	OperatorMinInUse = 1 << 20
	// OperatorWarmup: every informer lists once as it starts, so
	// relist_storm is judged only once the program has run this long.
	OperatorWarmup = 2 * time.Minute
	// GOMEMLIMITFraction of the container's memory limit is the
	// GOMEMLIMIT gomemlimit_unset proposes: room for the memory the Go
	// runtime does not count (stacks of threads, cgo, the binary).
	GOMEMLIMITFraction = 0.9
)

// Units of OperatorCause.Value.
const (
	UnitInUseShare = "in_use_share" // a share (0-1) of the bytes in use
	UnitAllocShare = "alloc_share"  // a share (0-1) of the bytes allocated over the window
	UnitBytes      = "bytes"        // bytes
)

// OperatorCause is one of an operator's own GC causes.
type OperatorCause struct {
	// Name is one of the Cause* constants.
	Name string
	// Words say what was seen, with the number that decided it.
	Words string
	// Fix says what to change, by API name.
	Fix string
	// Value is the number that decided it, in Unit, and Threshold the
	// value at which it is a cause.
	Value, Threshold float64
	// Unit is one of the Unit* constants.
	Unit string
	// Site is the line to change where there is one (for
	// cache_deep_copy, the Get or List of the cache read); zero otherwise.
	Site stackcapture.Frame
}

// String is the cause in one line: words, then the fix.
func (c OperatorCause) String() string {
	s := c.Name + ": " + c.Words
	if c.Fix != "" {
		s += "; fix: " + c.Fix
	}
	return s
}

// OperatorEnv is what JudgeOperator knows of the program besides its heap
// profile. ReadOperatorEnv fills it from the running program.
type OperatorEnv struct {
	// LinksKubernetes: the binary links client-go or controller-runtime
	// (LinksKubernetes). Without it JudgeOperator names nothing.
	LinksKubernetes bool
	// MemoryLimit is the Go runtime's memory limit
	// (debug.SetMemoryLimit(-1)); math.MaxInt64 when GOMEMLIMIT is unset.
	MemoryLimit int64
	// CgroupMemoryLimit is the container's memory limit in bytes; 0 for
	// none or unknown.
	CgroupMemoryLimit int64
	// Running is how long the program (or the probe) has run; past
	// OperatorWarmup, relist_storm is judged.
	Running time.Duration
}

// JudgeOperator returns the operator causes sn and env show, in the order
// of the Cause* constants; none when env.LinksKubernetes is false. sn
// comes from a Profiler given WithSignatures(OperatorSignatures()...).
func JudgeOperator(sn Snapshot, env OperatorEnv) []OperatorCause {
	if !env.LinksKubernetes {
		return nil
	}
	return judgeOperator(sn.Signatures, env)
}

// judgeOperator is JudgeOperator on the snapshot's signature figures.
func judgeOperator(stats []SignatureStat, env OperatorEnv) []OperatorCause {
	by := make(map[string]SignatureStat, len(stats))
	for _, s := range stats {
		by[s.Name] = s
	}
	var out []OperatorCause

	mf, mfj := by[SignatureManagedFields], by[SignatureManagedFieldsJSON]
	if share, bytes := mf.InUseShare+mfj.InUseShare, mf.InUseBytes+mfj.InUseBytes; share >= OperatorManagedFieldsShare && bytes >= OperatorMinInUse {
		out = append(out, OperatorCause{
			Name: CauseManagedFieldsCached,
			Words: fmt.Sprintf("managedFields hold %s of the heap in use (%s; threshold %s): the informer cache keeps every object's server-side apply field sets, which the reconcilers rarely read",
				pct(share), mib(bytes), pct(OperatorManagedFieldsShare)),
			Fix:   "strip them as objects enter the cache: cache.TransformStripManagedFields() as the manager's cache.Options.DefaultTransform (or a kind's cache.ByObject Transform)",
			Value: share, Threshold: OperatorManagedFieldsShare, Unit: UnitInUseShare,
		})
	}

	if k, name := biggerKind(by[SignaturePodDecode], by[SignatureSecretDecode]); k.InUseShare >= OperatorKindShare && k.InUseBytes >= OperatorMinInUse {
		out = append(out, OperatorCause{
			Name: CauseCacheNoTransform,
			Words: fmt.Sprintf("decoded %s hold %s of the heap in use (%s; threshold %s): a big kind cached whole, with no transform",
				name, pct(k.InUseShare), mib(k.InUseBytes), pct(OperatorKindShare)),
			Fix:   "cache less of it: a transform that drops the fields the reconcilers do not read (cache.Options.ByObject's Transform for that kind, or cache.Options.DefaultTransform), a label or field selector (cache.ByObject Label, Field), or metadata only (builder.OnlyMetadata)",
			Value: k.InUseShare, Threshold: OperatorKindShare, Unit: UnitInUseShare,
		})
	}

	if dc := by[SignatureCacheDeepCopy]; dc.AllocShare >= OperatorDeepCopyShare && dc.AllocBytesPerSecond >= OperatorMinRate {
		at := ""
		if dc.Site.Function != "" {
			at = " at " + dc.Site.Label()
		}
		out = append(out, OperatorCause{
			Name: CauseCacheDeepCopy,
			Words: fmt.Sprintf("deep copies of cache reads (controller-runtime's CacheReader Get/List) allocate %s/s, %s of all allocation (threshold %s)%s",
				mib(int64(dc.AllocBytesPerSecond)), pct(dc.AllocShare), pct(OperatorDeepCopyShare), at),
			Fix:   "where the result is only read, skip the copy: client.UnsafeDisableDeepCopy as an option of that List or Get (or cache.Options.DefaultUnsafeDisableDeepCopy for every read; never modify what it returns), or read fewer objects (client.MatchingLabels, client.MatchingFields on an index)",
			Value: dc.AllocShare, Threshold: OperatorDeepCopyShare, Unit: UnitAllocShare,
			Site: dc.Site,
		})
	}

	if env.Running >= OperatorWarmup {
		l, w := by[SignatureReflectorList], by[SignatureWatchDecode]
		share, rate := l.AllocShare+w.AllocShare, l.AllocBytesPerSecond+w.AllocBytesPerSecond
		if share >= OperatorRelistShare && rate >= OperatorMinRate {
			out = append(out, OperatorCause{
				Name: CauseRelistStorm,
				Words: fmt.Sprintf("the informers' lists and watch streams decode %s/s, %s of all allocation (threshold %s), long past their first list: reflectors relist, or a watched kind changes very often",
					mib(int64(rate)), pct(share), pct(OperatorRelistShare)),
				Fix:   "find why client-go's Reflector lists again (its log lines \"watch of ... ended with\" and \"failed to list\"; an expired resourceVersion after a slow handler); keep cache.Options.SyncPeriod at its default (10 h) or longer; watch fewer objects (cache.ByObject Label, Field)",
				Value: share, Threshold: OperatorRelistShare, Unit: UnitAllocShare,
			})
		}
	}

	if c := gomemlimitUnset(env); c != nil {
		out = append(out, *c)
	}
	return out
}

// biggerKind returns whichever of the Pod and Secret figures holds more,
// with the kind's name.
func biggerKind(pod, secret SignatureStat) (SignatureStat, string) {
	if secret.InUseShare > pod.InUseShare {
		return secret, "Secrets"
	}
	return pod, "Pods"
}

// gomemlimitUnset is the gomemlimit_unset cause, or nil.
func gomemlimitUnset(env OperatorEnv) *OperatorCause {
	if env.MemoryLimit != math.MaxInt64 || env.CgroupMemoryLimit <= 0 {
		return nil
	}
	set := goMemLimitValue(int64(float64(env.CgroupMemoryLimit) * GOMEMLIMITFraction))
	return &OperatorCause{
		Name: CauseGOMEMLIMITUnset,
		Words: fmt.Sprintf("GOMEMLIMIT is unset while the container's memory limit is %s: the GC paces by GOGC alone, and the heap may grow past the limit before the GC runs (an OOM kill)",
			mib(env.CgroupMemoryLimit)),
		Fix: fmt.Sprintf("set GOMEMLIMIT=%s (%s of the limit) in the container's environment, or call debug.SetMemoryLimit with it at start",
			set, pct(GOMEMLIMITFraction)),
		Value: float64(env.CgroupMemoryLimit), Threshold: 0, Unit: UnitBytes,
	}
}

// goMemLimitValue writes n bytes as GOMEMLIMIT reads them, rounded down to
// a whole MiB where there is one.
func goMemLimitValue(n int64) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dB", n)
}

// pct writes a share as a percentage.
func pct(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

// mib writes bytes in MiB.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
