package main

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
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

// runtimeBuildEnv marks the child test run in the runtime build mode that
// TestRuntimeBuild prepares.
const runtimeBuildEnv = "GCPROBE_RUNTIME_BUILD"

// TestRuntimeBuild builds this operator's package in the runtime build
// mode (finalizercheck -runtime, no -deps step, no change to any source)
// and runs TestRuntimeModeKubeClient in it.
func TestRuntimeBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: builds the operator with a patched runtime (the standard library once, then cached); drop -short to run it")
	}
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("skipping: the runtime build mode's tests run on amd64 and arm64 (GOARCH=%s)", runtime.GOARCH)
	}
	needTime(t, 10*time.Minute, "building the operator in the runtime build mode (the standard library and client-go)")
	gocmd, bin, tmp := buildFinalizercheck(t)
	out := goRun(t, nil, bin, "-runtime", filepath.Join(tmp, "rt"))
	lines := strings.Split(strings.TrimSpace(out), "\n")
	flags := strings.Fields(lines[len(lines)-1])

	args := slices.Concat([]string{"test"}, raceFlag(), flags, []string{"-count=1", "-v", "-run=^TestRuntimeModeKubeClient$", "."})
	start := time.Now()
	out = goRun(t, []string{runtimeBuildEnv + "=1"}, gocmd, args...)
	t.Logf("go %s (%v):\n%s", strings.Join(args, " "), time.Since(start).Round(time.Second), out)
	if !strings.Contains(out, "--- PASS: TestRuntimeModeKubeClient") {
		t.Errorf("TestRuntimeModeKubeClient did not pass in the runtime build mode")
	}
}

// TestRuntimeModeKubeClient makes the kube client do what an operator's
// does, with nothing routed through finalizerwatch: build clients with
// distinct TLS configurations (client-go's transport cache registers a
// cleanup per transport, in transport/cache.go) and talk TLS to a loopback
// server (the standard library registers a finalizer per connection, and a
// cleanup per certificate it caches). In the runtime build mode all of it
// is in the ledger: client-go's cleanups at its own cache.go line, the
// connections and the certificate cache under what registered them, on
// /metrics and in the profile.
func TestRuntimeModeKubeClient(t *testing.T) {
	if os.Getenv(runtimeBuildEnv) == "" {
		t.Skip("skipping: runs in the runtime build mode that TestRuntimeBuild prepares")
	}
	if !finalizerwatch.RuntimeMode() {
		t.Fatal("not built in the runtime build mode")
	}
	p, err := probe.Start(probe.WithRegisterer(prometheus.NewRegistry()), probe.WithListenAddr("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()

	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Success"}`)
	}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})

	// Clients per tenant (distinct TLS configurations, a transport each),
	// and one that talks TLS to the server for real.
	const clients = 4
	var keep []http.RoundTripper
	for i := range clients {
		cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca, ServerName: fmt.Sprintf("tenant-%d.example", i)}}
		if i == 0 {
			cfg.TLSClientConfig.ServerName = "example.com" // the test server's certificate names it
		}
		rt, err := rest.TransportFor(cfg)
		if err != nil {
			t.Fatal(err)
		}
		keep = append(keep, rt)
	}
	for range 3 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/version", nil)
		resp, err := (&http.Client{Transport: keep[0]}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}

	sites := ledgertest.Sites(p.Watcher())
	find := func(pred func(s finalizerwatch.SiteStats) bool) (finalizerwatch.SiteStats, bool) {
		for _, s := range sites {
			if pred(s) {
				return s, true
			}
		}
		return finalizerwatch.SiteStats{}, false
	}
	// client-go's own AddCleanup, at its line in the module cache: no
	// -deps step.
	cache, ok := find(func(s finalizerwatch.SiteStats) bool {
		return s.Kind == finalizerwatch.KindCleanup && strings.HasSuffix(s.Site.File, "/transport/cache.go")
	})
	if !ok || cache.Registered != clients || cache.Resource != "" {
		t.Fatalf("no cleanup site in client-go's transport/cache.go with %d registrations: %+v\nsites: %v", clients, cache, siteNames(sites))
	}
	if src, err := os.ReadFile(cache.Site.File); err != nil ||
		!strings.Contains(strings.Split(string(src), "\n")[cache.Site.Line-1], "runtime.AddCleanup(") {
		t.Errorf("%s:%d is not client-go's runtime.AddCleanup line (%v)", cache.Site.File, cache.Site.Line, err)
	}
	// The standard library's: the connections, and the certificates
	// the TLS handshakes cached.
	// client-go's connections are dialed on net/http's Transport's
	// goroutines: counted at the first frame outside the standard library
	// on the stack that made the request (client-go's RoundTrip wrapper),
	// named as an HTTP client's.
	conns, ok := find(func(s finalizerwatch.SiteStats) bool {
		return s.Resource == "net.Conn (HTTP client)" && s.Registered > 0
	})
	if !ok {
		t.Errorf("no site of net.Conn (HTTP client) registrations: %v", siteNames(sites))
	} else if strings.Contains(conns.Site.File, "/src/net/") {
		t.Errorf("the connections are counted at %s, a file of the standard library's", conns.Site.Label())
	}
	certs, ok := find(func(s finalizerwatch.SiteStats) bool {
		return s.Resource == "tls certificate cache" && s.Registered > 0
	})
	if !ok {
		t.Errorf("no site of the TLS certificate cache: %v", siteNames(sites))
	}
	t.Logf("cache.go: %s registered %d; connections: %s registered %d; certificates: %s registered %d",
		cache.Site, cache.Registered, conns.Site, conns.Registered, certs.Site, certs.Registered)

	base := "http://" + p.Addr().String()
	metrics := httpGet(t, base+"/metrics")
	for _, s := range []finalizerwatch.SiteStats{cache, conns, certs} {
		re := regexp.MustCompile(`(?m)^gcprobe_finalizers_registered_total\{kind="` + s.Kind.String() + `",site="` + regexp.QuoteMeta(s.Site.Label()) + `"\} [1-9]`)
		if !re.MatchString(metrics) {
			t.Errorf("/metrics has no registrations at %s", s.Site.Label())
		}
	}
	if !regexp.MustCompile(`(?m)^gcprobe_finalizers_dropped_total\{kind="finalizer",resource="net.Conn \(HTTP client\)",site="`).MatchString(metrics) {
		t.Errorf("/metrics has no dropped_total series for the connections")
	}
	prof, err := profile.Parse(strings.NewReader(httpGet(t, base+ProfilePath)))
	if err != nil {
		t.Fatal(err)
	}
	if !profileHasLeak(prof, cache.Site.Function, cache.Site.File, cache.Site.Line) {
		t.Errorf("the profile has no outstanding sample at %s:%d", cache.Site.File, cache.Site.Line)
	}
	runtime.KeepAlive(keep)
}

func siteNames(sites []finalizerwatch.SiteStats) []string {
	var out []string
	for _, s := range sites {
		out = append(out, fmt.Sprintf("%s %s (%s) registered %d", s.Kind, s.Site, s.Resource, s.Registered))
	}
	return out
}
