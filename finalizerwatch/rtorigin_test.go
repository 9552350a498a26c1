package finalizerwatch

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gcprobe/probe/internal/testkit"
	"github.com/gcprobe/probe/stackcapture"
)

// Origins across goroutines (rtorigin.go), in the runtime build mode: a
// registration on a goroutine that the standard library started is
// counted at the line of the program's that caused the goroutine. Like
// runtime_test.go, these run only in a binary built in the mode
// (scripts/runtime-mode-tests.sh).

// rtTestFile is this file's name as the binary records it (the test
// binary may be built with -trimpath).
func rtTestFile(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("runtime.Caller failed")
	}
	return file
}

// rtEntriesAt sums Default's ledger entries of kind k whose site is line
// of file by the name of their resource.
func rtEntriesAt(file string, line int) map[string]Counts {
	out := map[string]Counts{}
	rtSettle() // as Read: the counts on the P first
	Default.sites.Range(func(_ siteKey, s *site) bool {
		if s.indirect || s.kind != KindFinalizer {
			return true
		}
		if f := s.siteFrame(); f.File == file && f.Line == line {
			c := out[resourceOf(s.res).Name]
			c.Add(s.counts())
			out[resourceOf(s.res).Name] = c
		}
		return true
	})
	return out
}

// rtTopAt returns Default's finalizer sites of file, fresh, keyed by line,
// and their rank (0 first).
func rtTopAt(file string) (sites map[int]SiteStats, rank map[int]int) {
	var sn Snapshot
	Default.Read(&sn, ReadOptions{TopK: -1, Fresh: true})
	sites, rank = map[int]SiteStats{}, map[int]int{}
	for i, s := range sn.Kinds[KindFinalizer].Top {
		if s.Site.File == file {
			sites[s.Site.Line], rank[s.Site.Line] = s, i
		}
	}
	return sites, rank
}

// rtNoToolchainSite fails t if a site with outstanding registrations is a
// frame of the toolchain's source or of net/http (the lines no user can
// change), or is unattributed (named by its resource, in package net).
func rtNoToolchainSite(t *testing.T) {
	t.Helper()
	goroot := runtime.GOROOT()
	var sn Snapshot
	Default.Read(&sn, ReadOptions{TopK: -1, Fresh: true})
	for _, k := range sn.Kinds {
		for _, s := range k.Top {
			if s.Outstanding == 0 {
				continue
			}
			if strings.HasPrefix(s.Site.Function, "net/http.") || strings.HasPrefix(s.Site.Function, "net.") ||
				(goroot != "" && strings.HasPrefix(s.Site.File, goroot+"/src/")) {
				t.Errorf("a site of the toolchain's has %d outstanding: %s (resource %q)", s.Outstanding, s.Site, s.Resource)
			}
		}
	}
}

// TestRuntimeModeUnclosedResponseBody: a loop that calls client.Get on a
// known line and never closes the response bodies keeps a connection
// open per call, dialed on a goroutine net/http's Transport started.
// Each is counted at the client.Get line, named as an HTTP client's
// connection; a line that closes its bodies ends with none outstanding;
// the server's side of the same connections, accepted at the line that
// started the server, ranks below the client's line.
func TestRuntimeModeUnclosedResponseBody(t *testing.T) {
	attachDefault(t)
	file := rtTestFile(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	})}
	go srv.Serve(ln) // marker: serve
	t.Cleanup(func() { srv.Close() })
	url := "http://" + ln.Addr().String() + "/"

	leaky := &http.Client{Transport: &http.Transport{}}
	const n = 12
	var bodies []io.ReadCloser
	leak := func() {
		resp, err := leaky.Get(url) // marker: unclosed
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, resp.Body) // kept, never closed
	}
	for range n {
		leak()
	}
	careful := &http.Transport{DisableKeepAlives: true}
	tidy := &http.Client{Transport: careful}
	for range n {
		resp, err := tidy.Get(url) // marker: closed
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}

	unclosed := testkit.MarkerLine(t, "rtorigin_test.go", "unclosed")
	closed := testkit.MarkerLine(t, "rtorigin_test.go", "closed")
	serve := testkit.MarkerLine(t, "rtorigin_test.go", "serve")
	// The careful client's connections are closed by its connections'
	// own goroutines once each body is: the line has none outstanding
	// once they have.
	testkit.Poll(t, 10*time.Second, "the closed bodies' connections to be closed", func() bool {
		c, ok := rtEntriesAt(file, closed)["net.Conn (HTTP client)"]
		return ok && c.Registered == n && c.Outstanding == 0
	})
	got := rtEntriesAt(file, unclosed)
	if c := got["net.Conn (HTTP client)"]; c.Registered != n || c.Outstanding != n {
		t.Errorf("client.Get line %d: %v, want %d HTTP client connections registered and outstanding", unclosed, got, n)
	}
	if c := rtEntriesAt(file, serve)["net.Conn (accepted)"]; c.Outstanding < n {
		t.Errorf("server line %d: %v, want at least %d accepted connections outstanding", serve, rtEntriesAt(file, serve), n)
	}
	sites, rank := rtTopAt(file)
	s, ok := sites[unclosed]
	switch {
	case !ok:
		t.Fatalf("no site at the client.Get line %d: %v", unclosed, sites)
	case s.Resource != "net.Conn (HTTP client)" || s.Outstanding != n:
		t.Errorf("client.Get line: resource %q, %d outstanding; want net.Conn (HTTP client), %d", s.Resource, s.Outstanding, n)
	}
	if c := sites[closed]; c.Outstanding != 0 || c.Suspect != 0 {
		t.Errorf("the line that closes its bodies: %d outstanding, %d suspect, want none", c.Outstanding, c.Suspect)
	}
	if srvSite, ok := sites[serve]; !ok || !srvSite.Accepted {
		t.Errorf("server line %d: %+v, want a site of accepted connections", serve, srvSite)
	} else if rank[serve] < rank[unclosed] {
		t.Errorf("the server's accepted connections (rank %d, %d outstanding) rank above the client line that leaks them (rank %d, %d outstanding)",
			rank[serve], srvSite.Outstanding, rank[unclosed], s.Outstanding)
	}
	rtNoToolchainSite(t)

	// The leak goes on, a few bodies each GC cycle: the client.Get line
	// is classed growing, the leak named; the careful line never is.
	testkit.Poll(t, 30*time.Second, "the client.Get line classed growing", func() bool {
		for range 3 {
			leak()
		}
		runtime.GC()
		sites, _ = rtTopAt(file)
		s = sites[unclosed]
		return s.Class == ClassGrowing
	})
	if !strings.Contains(s.Leak, "response body not closed") {
		t.Errorf("the growing client.Get line's leak reads %q, want it to say the response body was not closed", s.Leak)
	}
	if c := sites[closed]; c.Class == ClassGrowing {
		t.Errorf("the line that closes its bodies is growing: %+v", c)
	}
	for _, b := range bodies {
		b.Close()
	}
	leaky.CloseIdleConnections()
}

// TestRuntimeModeOriginThroughNestedGoroutines: a reverse proxy's
// upstream connections are dialed on net/http's dial goroutine, started
// by the Transport on the proxy's connection goroutine, which net/http's
// Server started on the accept loop's goroutine: two standard-library
// go statements, on goroutines without a frame of the program's. The
// connections are counted at the line that started the accept loop.
func TestRuntimeModeOriginThroughNestedGoroutines(t *testing.T) {
	attachDefault(t)
	file := rtTestFile(t)
	backLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	back := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
	go back.Serve(backLn)
	t.Cleanup(func() { back.Close() })
	target, err := url.Parse("http://" + backLn.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	upstream := &http.Transport{}
	rp.Transport = upstream
	t.Cleanup(upstream.CloseIdleConnections)
	proxyLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	proxy := &http.Server{Handler: rp}
	go proxy.Serve(proxyLn) // marker: proxy
	t.Cleanup(func() { proxy.Close() })

	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + proxyLn.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	line := testkit.MarkerLine(t, "rtorigin_test.go", "proxy")
	got := rtEntriesAt(file, line)
	if c := got["net.Conn (HTTP client)"]; c.Registered != 1 {
		t.Errorf("proxy line %d: %v, want the proxy's one upstream connection, an HTTP client's", line, got)
	}
	if c := got["net.Conn (accepted)"]; c.Registered != 1 {
		t.Errorf("proxy line %d: %v, want the connection the proxy accepted", line, got)
	}
	rtNoToolchainSite(t)
}

// TestRuntimeModeGoOriginClasses: the origin of a goroutine started by a
// go statement of the program's is that statement; of one started by the
// standard library on a goroutine of the program's, the program's frame
// above it; a goroutine started on a goroutine without such a frame
// inherits its creator's.
func TestRuntimeModeGoOriginClasses(t *testing.T) {
	attachDefault(t)
	got := make(chan uintptr, 1)
	go func() { // marker: go-user
		pc, _ := goroutineOrigin()
		got <- pc
	}()
	checkOrigin(t, "a go statement of the program's", <-got, "go-user")

	// time.AfterFunc's function runs on a goroutine the timer starts:
	// none. context.AfterFunc's, on a goroutine that context's cancel
	// starts: the program's line that cancelled.
	time.AfterFunc(0, func() {
		pc, _ := goroutineOrigin()
		got <- pc
	})
	if pc := <-got; pc != 0 {
		t.Errorf("a timer's goroutine has origin %s, want none", frameAt(pc))
	}
	ctx, cancel := context.WithCancel(context.Background())
	context.AfterFunc(ctx, func() {
		pc, _ := goroutineOrigin()
		got <- pc
	})
	cancel() // marker: cancel
	checkOrigin(t, "context.AfterFunc's goroutine", <-got, "cancel")
}

func checkOrigin(t *testing.T, what string, pc uintptr, marker string) {
	t.Helper()
	want := testkit.MarkerLine(t, "rtorigin_test.go", marker)
	if f := frameAt(pc); f.Line != want || !strings.HasSuffix(f.File, "rtorigin_test.go") {
		t.Errorf("%s: origin %s, want line %d", what, f, want)
	}
}

func frameAt(pc uintptr) stackcapture.Frame {
	if pc == 0 {
		return stackcapture.Frame{}
	}
	return *stackcapture.SiteFrameOfPC(pc)
}

// TestGoOriginAllocs pins the go statement's hook to no allocation once a
// go statement's PC is classified: the program's (a table load) and the
// standard library's (a walk of the creating goroutine's stack, whose
// frames are classified once). It runs in any build: the hook is plain
// code, which only the runtime build mode calls.
func TestGoOriginAllocs(t *testing.T) {
	user := stackcapture.CallerPC(0)
	std := reflect.ValueOf(strings.ToUpper).Pointer() + 1
	for _, tt := range []struct {
		name string
		pc   uintptr
	}{
		{"program", user},
		{"standard library", std},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := rtGoOrigin(tt.pc, 0)
			if o == 0 {
				t.Fatalf("no origin for a go statement at %s", frameAt(tt.pc))
			}
			if got := testing.AllocsPerRun(allocPinRuns, func() { o = rtGoOrigin(tt.pc, 0) }); got != 0 {
				t.Errorf("the hook allocates %v times a go statement, want 0", got)
			}
		})
	}
}
