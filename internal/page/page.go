// Package page is the probe's live page: what the probe sees, for a
// person, without Prometheus. Three embedded files (index.html, page.js,
// page.css) and a JSON document (Data), built from the probe's one read
// (Input) and the history the probe keeps (History). The page fetches the
// document every few seconds from its own address and nothing else (its
// Content-Security-Policy forbids any other request), draws with plain
// SVG, and needs no build step. The root package serves it
// (probe.PageHandler), whose PageData and other Page types are this
// package's.
package page

import (
	"bytes"
	"embed"
	"encoding/json"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
)

// DataPath is the page's JSON document (Data), relative to the page.
const DataPath = "data.json"

//go:embed index.html page.js page.css
var files embed.FS

// asset is an embedded file and its content type.
type asset struct {
	body        []byte
	contentType string
}

var assets = func() map[string]asset {
	m := map[string]asset{}
	for name, ct := range map[string]string{
		"index.html": "text/html; charset=utf-8",
		"page.js":    "text/javascript; charset=utf-8",
		"page.css":   "text/css; charset=utf-8",
	} {
		b, err := files.ReadFile(name)
		if err != nil {
			panic("probe: embedded page file missing: " + name) // a build of this package without its files
		}
		m[name] = asset{b, ct}
	}
	return m
}()

// csp lets the page load its own script and style and fetch from its own
// origin, and nothing else: no network request leaves the probe.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the page, by the last element of the request's path: the
// page for a path ending in "/", its script and style, and DataPath,
// which data serves (ServeData). A path without the trailing slash is
// redirected to it; any other name is 404. GET and HEAD only.
func Handler(data http.Handler) http.Handler {
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
		switch a, ok := assets[name]; {
		case name == DataPath:
			data.ServeHTTP(w, r)
		case ok:
			serveAsset(w, a)
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

func setHeaders(h http.Header, contentType string) {
	h.Set("Content-Type", contentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

func serveAsset(w http.ResponseWriter, a asset) {
	setHeaders(w.Header(), a.contentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(a.body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(a.body) // HEAD: the server discards it
}

// ServeData answers the JSON document d, encoded into memory first so
// that a failure is a status code, not a truncated document.
func ServeData(w http.ResponseWriter, d *Data) {
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(d); err != nil {
		http.Error(w, "gcprobe: encoding the page's data failed", http.StatusInternalServerError)
		return
	}
	setHeaders(w.Header(), "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusOK)
	_, _ = buf.WriteTo(w)
}
