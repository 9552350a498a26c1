package pprofexporter

import (
	"cmp"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestHandlerDebugText: ?debug=1 answers the profile as text a person
// reads, as net/http/pprof does, naming the planted leak's site; ?debug=0
// and garbage still answer the download.
func TestHandlerDebugText(t *testing.T) {
	h := Handler(plantedWatcher(t))
	tests := []struct {
		name, query, wantType string
	}{
		{"debug=1", "?debug=1", "text/plain; charset=utf-8"},
		{"debug=2", "?debug=2", "text/plain; charset=utf-8"},
		{"sampled text", "?debug=1&sampled=1", "text/plain; charset=utf-8"},
		{"debug=0", "?debug=0", "application/octet-stream"},
		{"garbage", "?debug=%zz", "application/octet-stream"},
		{"none", "", "application/octet-stream"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/finalizers"+tt.query, nil))
			res := rec.Result()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != tt.wantType {
				t.Fatalf("status %d, Content-Type %q, want 200 and %q", res.StatusCode, res.Header.Get("Content-Type"), tt.wantType)
			}
			if !strings.HasPrefix(tt.wantType, "text/") {
				return
			}
			s := string(body)
			if !strings.HasPrefix(s, "gcprobe finalizers and cleanups: ") || !strings.Contains(s, "values: ") {
				t.Fatalf("text form:\n%s", s)
			}
			// The planted leak's values, in the order of the sample
			// types (TestProfile checks them by name).
			leak := map[string]string{SampleRegistered: "7", "executed": "0", SampleOutstanding: "7", SampleSuspect: "7", SampleGrowth: "0"}
			var types, values []string
			for _, typ := range ledgerTypes {
				types = append(types, typ+"/count")
				values = append(values, cmp.Or(leak[typ], `\d+`))
			}
			line := regexp.MustCompile(`(?m)^` + strings.Join(values, " ") + ` kind=finalizer\n.*pprof\.plantLeak /`)
			if tt.query == "?debug=1" && (!line.MatchString(s) || !strings.Contains(s, "values: "+strings.Join(types, " ")+" ")) {
				t.Fatalf("text form lacks the planted site or the values line:\n%s", s)
			}
		})
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodHead, "/debug/pprof/finalizers?debug=1", nil))
	if ct := rec.Result().Header.Get("Content-Type"); ct != "text/plain; charset=utf-8" || rec.Body.Len() != 0 {
		t.Fatalf("HEAD ?debug=1: Content-Type %q, %d bytes", ct, rec.Body.Len())
	}
}
