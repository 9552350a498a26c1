package heapprofile

import (
	"errors"
	"io/fs"
	"math"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gcprobe/probe/stackcapture"
)

// operatorEnv is an operator's environment with no memory-limit finding
// and past the warm-up.
var operatorEnv = OperatorEnv{LinksKubernetes: true, MemoryLimit: 1 << 30, Running: time.Hour}

// reconcileLine is where a reconciler lists from the cache, in the
// synthetic figures.
var reconcileLine = stackcapture.Frame{Function: "example.com/op/internal/controller.(*Reconciler).Reconcile", File: "/src/op/internal/controller/reconciler.go", Line: 42}

// unfixed are figures like those examples/operator measures without the
// fixes: managedFields 27% of the bytes in use, deep copies 97% of those
// allocated, at the reconciler's List.
var unfixed = []SignatureStat{
	{Name: SignatureManagedFields, InUseBytes: 6_900_000, InUseShare: 0.266},
	{Name: SignatureCacheDeepCopy, AllocBytes: 1_110_000_000, AllocBytesPerSecond: 111e6, AllocShare: 0.966, Site: reconcileLine},
	{Name: SignatureWatchDecode, InUseBytes: 23_300_000, InUseShare: 0.895},
}

// fixed are the same program's figures with both fixes.
var fixed = []SignatureStat{
	{Name: SignatureManagedFields},
	{Name: SignatureCacheDeepCopy},
	{Name: SignatureWatchDecode, InUseBytes: 16_600_000, InUseShare: 0.865},
}

func names(cs []OperatorCause) []string {
	var n []string
	for _, c := range cs {
		n = append(n, c.Name)
	}
	return n
}

func TestJudgeOperator(t *testing.T) {
	for _, tt := range []struct {
		name string
		give []SignatureStat
		env  OperatorEnv
		want []string
	}{
		{name: "unfixed", give: unfixed, env: operatorEnv, want: []string{CauseManagedFieldsCached, CauseCacheDeepCopy}},
		{name: "fixed", give: fixed, env: operatorEnv},
		{name: "no signatures", env: operatorEnv},
		{
			name: "managed fields at the threshold",
			give: []SignatureStat{{Name: SignatureManagedFields, InUseBytes: 2 << 20, InUseShare: 0.07}, {Name: SignatureManagedFieldsJSON, InUseBytes: 1 << 20, InUseShare: 0.03}},
			env:  operatorEnv, want: []string{CauseManagedFieldsCached},
		},
		{
			name: "managed fields just under",
			give: []SignatureStat{{Name: SignatureManagedFields, InUseBytes: 2 << 20, InUseShare: 0.0999}},
			env:  operatorEnv,
		},
		{
			name: "managed fields of a tiny heap",
			give: []SignatureStat{{Name: SignatureManagedFields, InUseBytes: 512 << 10, InUseShare: 0.5}},
			env:  operatorEnv,
		},
		{
			name: "pods cached whole",
			give: []SignatureStat{{Name: SignaturePodDecode, InUseBytes: 40 << 20, InUseShare: 0.37}},
			env:  operatorEnv, want: []string{CauseCacheNoTransform},
		},
		{
			name: "secrets cached whole",
			give: []SignatureStat{{Name: SignaturePodDecode, InUseBytes: 4 << 20, InUseShare: 0.04}, {Name: SignatureSecretDecode, InUseBytes: 30 << 20, InUseShare: 0.3}},
			env:  operatorEnv, want: []string{CauseCacheNoTransform},
		},
		{
			name: "deep copies at a low rate",
			give: []SignatureStat{{Name: SignatureCacheDeepCopy, AllocBytes: 5 << 20, AllocBytesPerSecond: 512 << 10, AllocShare: 0.9}},
			env:  operatorEnv,
		},
		{
			name: "deep copies a small share",
			give: []SignatureStat{{Name: SignatureCacheDeepCopy, AllocBytes: 50 << 20, AllocBytesPerSecond: 5 << 20, AllocShare: 0.2}},
			env:  operatorEnv,
		},
		{
			name: "relists",
			give: []SignatureStat{{Name: SignatureReflectorList, AllocBytesPerSecond: 3 << 20, AllocShare: 0.2}, {Name: SignatureWatchDecode, AllocBytesPerSecond: 2 << 20, AllocShare: 0.1}},
			env:  operatorEnv, want: []string{CauseRelistStorm},
		},
		{
			name: "the first list",
			give: []SignatureStat{{Name: SignatureWatchDecode, AllocBytesPerSecond: 50 << 20, AllocShare: 0.52}},
			env:  OperatorEnv{LinksKubernetes: true, MemoryLimit: 1 << 30, Running: 30 * time.Second},
		},
		{
			name: "no memory limit on the Go runtime under a container's",
			env:  OperatorEnv{LinksKubernetes: true, MemoryLimit: math.MaxInt64, CgroupMemoryLimit: 512 << 20},
			want: []string{CauseGOMEMLIMITUnset},
		},
		{
			name: "no memory limit anywhere",
			env:  OperatorEnv{LinksKubernetes: true, MemoryLimit: math.MaxInt64},
		},
		{
			name: "GOMEMLIMIT set",
			env:  OperatorEnv{LinksKubernetes: true, MemoryLimit: 460 << 20, CgroupMemoryLimit: 512 << 20},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := names(judgeOperator(tt.give, tt.env))
			if !slices.Equal(got, tt.want) {
				t.Errorf("causes %q, want %q", got, tt.want)
			}
		})
	}
}

// TestJudgeOperatorWords checks what each cause says: the number that
// decided it, the line, and the fix by its API name.
func TestJudgeOperatorWords(t *testing.T) {
	cs := judgeOperator(unfixed, OperatorEnv{LinksKubernetes: true, MemoryLimit: math.MaxInt64, CgroupMemoryLimit: 512 << 20})
	if got, want := names(cs), []string{CauseManagedFieldsCached, CauseCacheDeepCopy, CauseGOMEMLIMITUnset}; !slices.Equal(got, want) {
		t.Fatalf("causes %q, want %q", got, want)
	}
	for _, tt := range []struct {
		give      OperatorCause
		wantWords []string
		wantFix   []string
		value     float64
		unit      string
		site      stackcapture.Frame
	}{
		{cs[0], []string{"managedFields hold 27% of the heap in use", "6.6 MiB", "threshold 10%"}, []string{"cache.TransformStripManagedFields()", "cache.Options.DefaultTransform"}, 0.266, UnitInUseShare, stackcapture.Frame{}},
		{cs[1], []string{"105.9 MiB/s", "97% of all allocation", "threshold 25%", "at " + reconcileLine.Label()}, []string{"client.UnsafeDisableDeepCopy", "cache.Options.DefaultUnsafeDisableDeepCopy"}, 0.966, UnitAllocShare, reconcileLine},
		{cs[2], []string{"GOMEMLIMIT is unset", "512.0 MiB"}, []string{"GOMEMLIMIT=460MiB", "90% of the limit", "debug.SetMemoryLimit"}, 512 << 20, UnitBytes, stackcapture.Frame{}},
	} {
		for _, w := range tt.wantWords {
			if !strings.Contains(tt.give.Words, w) {
				t.Errorf("%s: words %q lack %q", tt.give.Name, tt.give.Words, w)
			}
		}
		for _, w := range tt.wantFix {
			if !strings.Contains(tt.give.Fix, w) {
				t.Errorf("%s: fix %q lacks %q", tt.give.Name, tt.give.Fix, w)
			}
		}
		if tt.give.Value != tt.value || tt.give.Unit != tt.unit || tt.give.Site != tt.site {
			t.Errorf("%s: value %v %s at %v, want %v %s at %v", tt.give.Name, tt.give.Value, tt.give.Unit, tt.give.Site, tt.value, tt.unit, tt.site)
		}
		if !strings.HasPrefix(tt.give.String(), tt.give.Name+": ") {
			t.Errorf("String() = %q", tt.give.String())
		}
	}
}

// TestJudgeOperatorReadsSnapshot: JudgeOperator judges the snapshot's
// signature figures.
func TestJudgeOperatorReadsSnapshot(t *testing.T) {
	sn := Snapshot{Signatures: unfixed, Window: 10 * time.Second}
	if got, want := names(JudgeOperator(sn, operatorEnv)), []string{CauseManagedFieldsCached, CauseCacheDeepCopy}; !slices.Equal(got, want) {
		t.Errorf("causes %q, want %q", got, want)
	}
	env := operatorEnv
	env.LinksKubernetes = false
	if cs := JudgeOperator(sn, env); len(cs) != 0 {
		t.Errorf("causes %v for a program that links neither client-go nor controller-runtime", cs)
	}
}

// TestJudgeOperatorNotAnOperator: a program that links neither client-go
// nor controller-runtime is told nothing of them, whatever its figures.
func TestJudgeOperatorNotAnOperator(t *testing.T) {
	env := ReadOperatorEnv()
	if env.LinksKubernetes {
		t.Fatal("the core module's test binary links client-go or controller-runtime")
	}
	env.MemoryLimit, env.CgroupMemoryLimit, env.Running = math.MaxInt64, 512<<20, time.Hour
	if cs := JudgeOperator(Snapshot{}, env); len(cs) != 0 {
		t.Errorf("causes %v for a program that is no operator", cs)
	}
}

func TestBuildLinksKubernetes(t *testing.T) {
	mods := func(paths ...string) []*debug.Module {
		var ms []*debug.Module
		for _, p := range paths {
			ms = append(ms, &debug.Module{Path: p, Version: "v1.0.0"})
		}
		return ms
	}
	for _, tt := range []struct {
		name string
		give debug.BuildInfo
		want bool
	}{
		{"client-go", debug.BuildInfo{Deps: mods("github.com/x/y", "k8s.io/client-go")}, true},
		{"controller-runtime", debug.BuildInfo{Deps: mods("sigs.k8s.io/controller-runtime")}, true},
		{"apimachinery alone", debug.BuildInfo{Deps: mods("k8s.io/apimachinery", "k8s.io/api")}, false},
		{"a fork replacing client-go", debug.BuildInfo{Deps: []*debug.Module{{Path: "example.com/fork", Replace: &debug.Module{Path: "k8s.io/client-go"}}}}, true},
		{"client-go itself", debug.BuildInfo{Main: debug.Module{Path: "k8s.io/client-go"}}, true},
		{"none", debug.BuildInfo{Deps: mods("github.com/prometheus/client_golang")}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := buildLinksKubernetes(&tt.give); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCgroupMemoryLimit(t *testing.T) {
	files := func(m map[string]string) func(string) ([]byte, error) {
		return func(name string) ([]byte, error) {
			if s, ok := m[name]; ok {
				return []byte(s), nil
			}
			return nil, fs.ErrNotExist
		}
	}
	for _, tt := range []struct {
		name string
		give map[string]string
		want int64
	}{
		{"v2 limit", map[string]string{cgroupV2MemoryMax: "536870912\n"}, 512 << 20},
		{"v2 none", map[string]string{cgroupV2MemoryMax: "max\n"}, 0},
		{"v1 limit", map[string]string{cgroupV1MemoryMax: "268435456\n"}, 256 << 20},
		{"v1 none", map[string]string{cgroupV1MemoryMax: "9223372036854771712\n"}, 0},
		{"v2 first", map[string]string{cgroupV2MemoryMax: "536870912", cgroupV1MemoryMax: "268435456"}, 512 << 20},
		{"garbage", map[string]string{cgroupV2MemoryMax: "lots"}, 0},
		{"no cgroup", nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := cgroupMemoryLimit(files(tt.give)); got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
	// A read error other than a missing file is no limit either.
	if got := cgroupMemoryLimit(func(string) ([]byte, error) { return nil, errors.New("permission denied") }); got != 0 {
		t.Errorf("unreadable: got %d, want 0", got)
	}
}

// TestOperatorSignatures: the names are the constants, unique, and each
// signature has frames.
func TestOperatorSignatures(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range OperatorSignatures() {
		if seen[s.Name] || !strings.HasPrefix(s.Name, "k8s_") || len(s.Frames) == 0 {
			t.Errorf("signature %+v: duplicate, unprefixed or frameless", s)
		}
		seen[s.Name] = true
	}
	for _, n := range []string{SignatureManagedFields, SignatureManagedFieldsJSON, SignaturePodDecode, SignatureSecretDecode, SignatureCacheDeepCopy, SignatureReflectorList, SignatureWatchDecode} {
		if !seen[n] {
			t.Errorf("no signature %s", n)
		}
	}
}
