package pprofexporter

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/testkit"
	"github.com/google/pprof/profile"
)

type sampledObj struct {
	p *int
	a [4]uint64
}

//go:noinline
func sampledRegister(w *finalizerwatch.Watcher, o *sampledObj) {
	w.SetFinalizer(o, func(*sampledObj) {}) // marker: sampled-register
}

//go:noinline
func sampledPathA(w *finalizerwatch.Watcher, o *sampledObj) { sampledRegister(w, o) } // marker: sampled-path-a

//go:noinline
func sampledPathB(w *finalizerwatch.Watcher, o *sampledObj) { sampledRegister(w, o) } // marker: sampled-path-b

// TestSampledProfile: with every registration sampled, the sampled profile
// has one sample per path into the site, valued by its outstanding and
// registered registrations, and says how it was sampled; served by the
// handler with ?sampled=1, go tool pprof's parser reads it.
func TestSampledProfile(t *testing.T) {
	w, err := finalizerwatch.New(finalizerwatch.WithStackSampleRate(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	var keep []*sampledObj
	for i := range 5 {
		o := &sampledObj{}
		if i < 2 {
			sampledPathA(w, o)
		} else {
			sampledPathB(w, o)
		}
		keep = append(keep, o)
	}
	w.SetFinalizer(keep[4], nil) // one of B's cleared
	lineA := testkit.MarkerLine(t, "sampled_test.go", "sampled-path-a")
	lineB := testkit.MarkerLine(t, "sampled_test.go", "sampled-path-b")

	rec := httptest.NewRecorder()
	Handler(w).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/finalizers?sampled=1", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	p, err := profile.Parse(bytes.NewReader(rec.Body.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Comments) != 1 || !strings.Contains(p.Comments[0], "one registration in 1") {
		t.Errorf("comments %q, want the sample rate", p.Comments)
	}
	if p.DefaultSampleType != SampleOutstanding || len(p.SampleType) != 2 {
		t.Errorf("sample types %v (default %q)", p.SampleType, p.DefaultSampleType)
	}
	got := map[int][2]int64{}
	for _, s := range p.Sample {
		if len(s.Location) < 2 || len(s.Location[1].Line) == 0 {
			t.Fatalf("sample with a short stack: %v", s.Location)
		}
		got[int(s.Location[1].Line[0].Line)] = [2]int64{s.Value[0], s.Value[1]}
	}
	if want := map[int][2]int64{lineA: {2, 2}, lineB: {2, 3}}; len(got) != 2 || got[lineA] != want[lineA] || got[lineB] != want[lineB] {
		t.Errorf("samples by caller line %v, want %v", got, want)
	}
	runtime.KeepAlive(keep)

	// Without ?sampled=1, the ledger's profile, as before.
	rec = httptest.NewRecorder()
	Handler(w).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/finalizers", nil))
	if p, err := profile.Parse(bytes.NewReader(rec.Body.Bytes())); err != nil || p.DefaultSampleType != SampleLeaked {
		t.Fatalf("plain profile: %v, default %q", err, p.DefaultSampleType)
	}
}
