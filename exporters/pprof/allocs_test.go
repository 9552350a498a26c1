package pprofexporter

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"

	"github.com/gcprobe/probe/heapprofile"
	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/stackcapture"
)

var allocSink []byte

// allocHere allocates n bytes in 8 KiB objects at one line.
//
//go:noinline
func allocHere(n int) {
	for range n / 8192 {
		allocSink = make([]byte, 8192) // marker: alloc-here
	}
}

// allocsSnapshot reads the heap profile around 64 MiB allocated at
// allocHere's line.
func allocsSnapshot(t *testing.T) heapprofile.Snapshot {
	t.Helper()
	h, err := heapprofile.New()
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	runtime.GC()
	h.Sample()
	allocHere(64 << 20)
	runtime.GC() // the runtime publishes the profile per cycle
	runtime.GC()
	h.Sample()
	sn := h.Snapshot()
	if len(sn.Allocating) == 0 {
		t.Fatal("no allocating site")
	}
	return sn
}

func TestAllocsProfile(t *testing.T) {
	line := testkit.MarkerLine(t, "allocs_test.go", "alloc-here")
	sn := allocsSnapshot(t)
	var buf bytes.Buffer
	if err := WriteAllocs(&buf, sn); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	if p.DefaultSampleType != SampleAllocSpace || len(p.SampleType) != 4 || p.DurationNanos != sn.Window.Nanoseconds() {
		t.Fatalf("sample types %v, default %s, duration %d", p.SampleType, p.DefaultSampleType, p.DurationNanos)
	}
	top := p.Sample[0]
	l := top.Location[0].Line[0]
	if !strings.HasSuffix(l.Function.Name, "exporters/pprof.allocHere") || l.Line != int64(line) {
		t.Fatalf("first sample at %s:%d, want allocHere's line %d", l.Function.Name, l.Line, line)
	}
	if v := top.Value[0]; v < 32<<20 || v > 128<<20 {
		t.Errorf("alloc_space %d, want about 64 MiB", v)
	}
}

// TestAllocsGoToolPprof opens the delta profile with go tool pprof -top, as
// a user would, through the handler.
func TestAllocsGoToolPprof(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go tool pprof")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	sn := allocsSnapshot(t)
	srv := httptest.NewServer(AllocsHandler(func() heapprofile.Snapshot { return sn }))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var data bytes.Buffer
	if _, err := data.ReadFrom(resp.Body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %d, %v", resp.StatusCode, err)
	}
	if cd := resp.Header.Get("Content-Disposition"); !strings.Contains(cd, "gcprobe-allocs.pb.gz") {
		t.Errorf("Content-Disposition %q", cd)
	}
	file := filepath.Join(t.TempDir(), "gcprobe-allocs.pb.gz")
	if err := os.WriteFile(file, data.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goTool, "tool", "pprof", "-top", file)
	cmd.Env = append(os.Environ(), "PPROF_TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -top: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "Type: alloc_space") || !strings.Contains(string(out), "exporters/pprof.allocHere") {
		t.Errorf("go tool pprof -top does not list allocHere by alloc_space:\n%s", out)
	}

	// A person's view, and the methods refused.
	rec := httptest.NewRecorder()
	AllocsHandler(func() heapprofile.Snapshot { return sn }).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/?debug=1", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "allocHere") {
		t.Errorf("?debug=1: %d\n%s", rec.Code, rec.Body.String())
	}
	rec = httptest.NewRecorder()
	AllocsHandler(func() heapprofile.Snapshot { return sn }).ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", rec.Code)
	}
}

// pathSnapshot is a snapshot of one site whose allocation happens two
// calls below it, in the standard library.
func pathSnapshot() heapprofile.Snapshot {
	site := stackcapture.Frame{Function: "example.com/app/web.(*W).ReadFrom", File: "/src/app/web/rw.go", Line: 50}
	return heapprofile.Snapshot{Status: heapprofile.StatusOK, Time: time.Unix(100, 0), Window: 10 * time.Second, Rate: 512 << 10,
		Allocating: []heapprofile.Site{{
			Frame: site,
			Stack: []stackcapture.Frame{site, {Function: "example.com/app/web.serve", File: "/src/app/web/serve.go", Line: 9}},
			Path: []stackcapture.Frame{
				{Function: "io.Copy", File: "/go/src/io/io.go", Line: 388},
				{Function: "io.copyBuffer", File: "/go/src/io/io.go", Line: 411},
			},
			AllocBytes: 64 << 20, AllocObjects: 16,
		}}}
}

func TestAllocsProfileBeginsAtTheAllocation(t *testing.T) {
	p := AllocsProfile(pathSnapshot())
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range p.Sample[0].Location {
		got = append(got, l.Line[0].Function.Name)
	}
	want := []string{"io.copyBuffer", "io.Copy", "example.com/app/web.(*W).ReadFrom", "example.com/app/web.serve"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("sample stack %v, want the path innermost first, then the site and its callers %v", got, want)
	}
}

// TestAllocsGoToolPprofTraces reads the path with go tool pprof -traces,
// as a user would.
func TestAllocsGoToolPprofTraces(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go tool pprof")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	file := filepath.Join(t.TempDir(), "gcprobe-allocs.pb.gz")
	var buf bytes.Buffer
	if err := WriteAllocs(&buf, pathSnapshot()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goTool, "tool", "pprof", "-traces", file)
	cmd.Env = append(os.Environ(), "PPROF_TMPDIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof -traces: %v\n%s", err, out)
	}
	s := string(out)
	i, j, k := strings.Index(s, "io.copyBuffer"), strings.Index(s, "io.Copy\n"), strings.Index(s, "web.(*W).ReadFrom")
	if i < 0 || j < 0 || k < 0 || !(i < j && j < k) {
		t.Errorf("go tool pprof -traces does not show io.copyBuffer, io.Copy, then the site:\n%s", s)
	}
}

func TestAllocsProfileSaysWhyItIsEmpty(t *testing.T) {
	p := AllocsProfile(heapprofile.Snapshot{Status: heapprofile.StatusOff})
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	if len(p.Sample) != 0 || !strings.Contains(strings.Join(p.Comments, "\n"), "runtime.MemProfileRate = 0") {
		t.Errorf("the profile off: samples %d, comments %q", len(p.Sample), p.Comments)
	}
	if p := AllocsProfile(pathSnapshot()); len(p.Comments) != 1 {
		t.Errorf("a profile that reads: comments %q, want the window's alone", p.Comments)
	}
}

func TestAllocsProfileRuntimeSite(t *testing.T) {
	rt := stackcapture.Frame{Function: heapprofile.RuntimeSite}
	sn := heapprofile.Snapshot{Status: heapprofile.StatusOK, Window: time.Second, Rate: 512 << 10,
		Allocating: []heapprofile.Site{{Frame: rt, Stack: []stackcapture.Frame{rt}, AllocBytes: 1 << 20, AllocObjects: 1}}}
	p := AllocsProfile(sn)
	if err := p.CheckValid(); err != nil {
		t.Fatal(err)
	}
	if l := p.Sample[0].Location; len(l) != 1 || l[0].Line[0].Function.Name != heapprofile.RuntimeSite {
		t.Errorf("the runtime's site: %v", l)
	}
}
