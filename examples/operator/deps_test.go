package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/gcprobe/probe"
	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/internal/ledgertest"
)

// depsBuildEnv marks the child test run in the build that
// TestDepsBuild prepares.
const depsBuildEnv = "GCPROBE_DEPS_BUILD"

// TestDepsBuild prepares this operator's build with finalizercheck -deps
// and runs TestTransportCleanupsAtCacheGo in it: client-go's cleanups on
// its cached TLS transports (k8s.io/client-go/transport/cache.go) are
// then counted at their lines in the module cache. No apiserver is
// needed: building clients registers the cleanups.
func TestDepsBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: rebuilds client-go and the operator in a prepared build (1 to 5 min); drop -short to run it")
	}
	needTime(t, 6*time.Minute, "rebuilding client-go and the operator in a prepared build")
	gocmd, bin, tmp := buildFinalizercheck(t)
	// -modfile does not apply in workspace mode: build from this
	// directory's go.mod alone, whatever go.work lies above it.
	env := []string{"GOWORK=off"}
	out := goRun(t, env, bin, "-deps", filepath.Join(tmp, "prepared"), ".")
	t.Logf("finalizercheck -deps:\n%s", out)
	if !regexp.MustCompile(`(?m)^watched .*/k8s\.io/client-go@[^/]+/transport/cache\.go:\d+$`).MatchString(out) {
		t.Fatalf("finalizercheck -deps does not rewrite client-go's transport/cache.go:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	flags := strings.Fields(lines[len(lines)-1])

	args := slices.Concat([]string{"test"}, raceFlag(), flags, []string{"-count=1", "-v", "-run=^TestTransportCleanupsAtCacheGo$", "."})
	start := time.Now()
	out = goRun(t, append(env, depsBuildEnv+"=1"), gocmd, args...)
	t.Logf("go %s (%v):\n%s", strings.Join(args, " "), time.Since(start).Round(time.Second), out)
	if !strings.Contains(out, "--- PASS: TestTransportCleanupsAtCacheGo") {
		t.Errorf("TestTransportCleanupsAtCacheGo did not pass in the prepared build")
	}
}

// TestTransportCleanupsAtCacheGo builds clients with distinct TLS
// configurations, as a controller that makes a client per tenant does,
// and finds client-go's cleanups on the cached transports at
// transport/cache.go lines in the ledger, on /metrics and in the profile.
// It runs only in the build that TestDepsBuild prepares: elsewhere the
// cleanups bypass the ledger.
func TestTransportCleanupsAtCacheGo(t *testing.T) {
	if os.Getenv(depsBuildEnv) == "" {
		t.Skip("skipping: runs in the build that TestDepsBuild prepares with finalizercheck -deps")
	}
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithListenAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()

	const clients = 3
	var keep []http.RoundTripper
	for i := range clients {
		rt, err := rest.TransportFor(&rest.Config{
			Host:            "https://127.0.0.1:1",
			TLSClientConfig: rest.TLSClientConfig{ServerName: fmt.Sprintf("tenant-%d.example", i)},
		})
		if err != nil {
			t.Fatal(err)
		}
		keep = append(keep, rt)
	}

	// The ledger: one site in transport/cache.go, the original file in
	// the module cache, its line the AddCleanup call.
	var site finalizerwatch.SiteStats
	for _, s := range ledgertest.Sites(p.Watcher()) {
		if s.Kind == finalizerwatch.KindCleanup && strings.HasSuffix(s.Site.File, "/transport/cache.go") {
			site = s
		}
	}
	if site.Registered != clients {
		t.Fatalf("no cleanup site in transport/cache.go with %d registrations; the ledger has %v", clients, ledgertest.Sites(p.Watcher()))
	}
	src, err := os.ReadFile(site.Site.File)
	if err != nil {
		t.Fatalf("the site's file: %v", err)
	}
	if l := strings.Split(string(src), "\n"); site.Site.Line > len(l) || !strings.Contains(l[site.Site.Line-1], "runtime.AddCleanup(") {
		t.Fatalf("%s:%d is not a runtime.AddCleanup call in the original file", site.Site.File, site.Site.Line)
	}
	if !strings.Contains(site.Site.File, "/k8s.io/client-go@") {
		t.Errorf("site file %s is not client-go's in the module cache", site.Site.File)
	}
	t.Logf("cache.go site: %s %s:%d registered=%d", site.Site.Function, site.Site.File, site.Site.Line, site.Registered)

	base := "http://" + p.Addr().String()
	// /metrics: the registrations at that site.
	metrics := httpGet(t, base+"/metrics")
	label := fmt.Sprintf(`gcprobe_finalizers_registered_total{kind="cleanup",site=%s} `, strconv.Quote(site.Site.Label()))
	if got := metricValue(metrics, label); got != strconv.Itoa(clients) {
		t.Errorf("/metrics: %s= %q, want %d", label, got, clients)
	}
	// The profile: the transports are outstanding at that line.
	prof, err := profile.Parse(strings.NewReader(httpGet(t, base+ProfilePath)))
	if err != nil {
		t.Fatal(err)
	}
	if !profileHasLeak(prof, site.Site.Function, site.Site.File, site.Site.Line) {
		t.Errorf("the profile has no outstanding sample at %s:%d", site.Site.File, site.Site.Line)
	}
	runtime.KeepAlive(keep) // alive until here: the profile counts them outstanding
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %v %v", url, resp.Status, err)
	}
	return string(b)
}

// metricValue returns the value of the sample line that starts with
// prefix, or "".
func metricValue(metrics, prefix string) string {
	sc := bufio.NewScanner(strings.NewReader(metrics))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			return v
		}
	}
	return ""
}

// buildFinalizercheck builds cmd/finalizercheck into a temporary directory
// and returns the go command, the binary and that directory; it skips the
// test where the go command is not on PATH.
func buildFinalizercheck(t *testing.T) (gocmd, bin, tmp string) {
	t.Helper()
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("skipping: the go command is not on PATH, and this test builds with it")
	}
	tmp = t.TempDir()
	bin = filepath.Join(tmp, "finalizercheck")
	goRun(t, nil, gocmd, "build", "-C", filepath.Join("..", "..", "cmd", "finalizercheck"), "-o", bin, ".")
	return gocmd, bin, tmp
}

// goRun runs name with args in this package's directory, with env added,
// and returns its combined output; it fails the test if the command fails,
// or if it would outlive go test's -timeout (see command).
// raceFlag is -race when this test binary was built with it: a build
// the tests run then shares, in the cache, every package that the
// preparation does not change with this binary's own build (client-go's
// API types, apimachinery, controller-runtime's), instead of compiling
// them all again without it.
func raceFlag() []string {
	if raceEnabled {
		return []string{"-race"}
	}
	return nil
}

func goRun(t *testing.T, env []string, name string, args ...string) string {
	t.Helper()
	cmd, ctx := command(t, name, args...)
	cmd.Env = append(os.Environ(), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil && ctx.Err() != nil {
		t.Fatalf("%s %s: stopped after %v, %v before go test's -timeout would have killed this test binary; %s\n%s",
			name, strings.Join(args, " "), time.Since(start).Round(time.Second), deadlineMargin, timeoutAdvice, out)
	}
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
