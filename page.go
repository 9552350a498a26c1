package probe

import (
	"bytes"
	"embed"
	"encoding/json"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
)

// The live page: what the probe sees, for a person, without Prometheus.
// Three embedded files (page/) and a JSON document (PageData), all served
// by PageHandler; the page fetches the document every few seconds from
// its own address and nothing else (its Content-Security-Policy forbids
// any other request), draws with plain SVG, and needs no build step.

// PagePath is where WithListenAddr's listener serves the live page, and
// where PageHandler is meant to be mounted. PageDataPath is the page's
// JSON document (PageData), relative to the page.
const (
	PagePath     = "/debug/gcprobe/"
	PageDataPath = "data.json"
)

//go:embed page/index.html page/page.js page/page.css
var pageFS embed.FS

// pageMaxConcurrent bounds the documents built at once; a build reads the
// ledger's top sites (O(WithTopK)) and the history (O(PageHistoryCycles)).
const pageMaxConcurrent = 4

// pageAsset is an embedded file and its content type.
type pageAsset struct {
	body        []byte
	contentType string
}

var pageAssets = func() map[string]pageAsset {
	m := map[string]pageAsset{}
	for name, ct := range map[string]string{
		"index.html": "text/html; charset=utf-8",
		"page.js":    "text/javascript; charset=utf-8",
		"page.css":   "text/css; charset=utf-8",
	} {
		b, err := pageFS.ReadFile("page/" + name)
		if err != nil {
			panic("probe: embedded page file missing: " + name) // a build of this package without its files
		}
		m[name] = pageAsset{b, ct}
	}
	return m
}()

// pageCSP lets the page load its own script and style and fetch from its
// own origin, and nothing else: no network request leaves the probe.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// PageHandler serves the live page: the top sites by the leak model with
// their class, growth, counts and a per-GC-cycle sparkline of suspects,
// each site's registration stack on click, a site that dropped files or
// connections without Close marked as a leak with what to do at its line
// (PageSite.Verdict and Words), and whether the runtime build mode is on;
// the finalizer and cleanup
// queues, GC pauses, heap live and goal and GC CPU per GC cycle; the
// callback running now; the detectors firing and their history; links to
// the pprof profile (and its text form) and to /metrics. Mount it at
// PagePath (/debug/gcprobe/, trailing slash: it serves a subtree), for
// example as an extra handler of controller-runtime's metrics server, where
// it gets the same authentication and authorization as /metrics:
//
//	ExtraHandlers: map[string]http.Handler{
//		probe.ProfilePath: p.ProfileHandler(),
//		probe.PagePath:    p.PageHandler(),
//	}
//
// WithListenAddr's listener serves it at PagePath itself.
//
// The handler serves, by the last element of the request's path: the page
// for a path ending in "/", its script and style, and PageDataPath, the
// JSON document the page reads (PageData; documented for scripts and
// tests). A path without the trailing slash is redirected to it; any other
// name is 404. GET and HEAD only. The history the page shows is kept by
// the probe (PageHistoryCycles cycles, PageEvents detector events) while
// it runs, so a reload keeps it. At most 4 documents are built at once
// (others wait up to 10 s, then 503); a document is bounded (WithTopK
// sites, stacks of 48 frames). Like ProfileHandler it serves before Start
// and while the probe runs, 503 after Stop; the handler of a nil or
// zero-value Probe answers 500.
func (p *Probe) PageHandler() http.Handler {
	if err := p.made("PageHandler"); err != nil {
		return unmadeHandler(err)
	}
	return p.guard(p.pageHandler())
}

// pageHandler is PageHandler without the guard, for Handler, which has
// its own.
func (p *Probe) pageHandler() http.Handler {
	data := queue(pageMaxConcurrent, p.life.Done(), http.HandlerFunc(p.serveData))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		name := "index.html"
		if !strings.HasSuffix(r.URL.Path, "/") {
			name = path.Base(r.URL.Path)
		}
		switch a, ok := pageAssets[name]; {
		case name == PageDataPath:
			data.ServeHTTP(w, r)
		case ok:
			servePageAsset(w, a)
		case !strings.HasSuffix(r.URL.Path, "/") && name != "" && name != "/" && !strings.ContainsAny(name, ".:"):
			// The page's folder without its slash: relative to the
			// request, "./name/" is the page (the relative form keeps a
			// handler mounted anywhere, or behind a prefix, right).
			// (http.Redirect would make it absolute, against a path
			// a StripPrefix may have cut.)
			w.Header().Set("Location", "./"+url.PathEscape(name)+"/")
			w.WriteHeader(http.StatusMovedPermanently)
		default:
			http.NotFound(w, r)
		}
	})
}

func setPageHeaders(h http.Header, contentType string) {
	h.Set("Content-Type", contentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

func servePageAsset(w http.ResponseWriter, a pageAsset) {
	setPageHeaders(w.Header(), a.contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(a.body) // HEAD: the server discards it
}

// serveData answers the JSON document, built into memory first so that a
// failure is a status code, not a truncated document.
func (p *Probe) serveData(w http.ResponseWriter, r *http.Request) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(p.pageData(time.Now())); err != nil {
		http.Error(w, "gcprobe: encoding the page's data failed", http.StatusInternalServerError)
		return
	}
	setPageHeaders(w.Header(), "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = buf.WriteTo(w)
}
