package pprofexporter

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/google/pprof/profile"
)

func TestHandler(t *testing.T) {
	w := plantedWatcher(t)
	h := Handler(w)
	tests := []struct {
		method     string
		wantStatus int
		wantBody   bool
	}{
		{http.MethodGet, http.StatusOK, true},
		{http.MethodHead, http.StatusOK, false},
		{http.MethodPost, http.StatusMethodNotAllowed, false},
		{http.MethodPut, http.StatusMethodNotAllowed, false},
		{http.MethodDelete, http.StatusMethodNotAllowed, false},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, "/debug/pprof/finalizers", nil))
			res := rec.Result()
			if res.StatusCode != tt.wantStatus {
				t.Fatalf("%s: status %d, want %d", tt.method, res.StatusCode, tt.wantStatus)
			}
			if tt.wantStatus == http.StatusMethodNotAllowed {
				if got := res.Header.Get("Allow"); got != "GET, HEAD" {
					t.Errorf("Allow %q, want \"GET, HEAD\"", got)
				}
				return
			}
			if got := res.Header.Get("Content-Type"); got != "application/octet-stream" {
				t.Errorf("Content-Type %q", got)
			}
			if got := res.Header.Get("Content-Disposition"); got != `attachment; filename="finalizers.pb.gz"` {
				t.Errorf("Content-Disposition %q", got)
			}
			body, _ := io.ReadAll(res.Body)
			if !tt.wantBody {
				if len(body) != 0 {
					t.Errorf("%s: %d bytes of body", tt.method, len(body))
				}
				return
			}
			p, err := profile.ParseData(body)
			if err != nil {
				t.Fatal(err)
			}
			if err := p.CheckValid(); err != nil {
				t.Fatal(err)
			}
			if len(p.Sample) == 0 {
				t.Error("served profile has no sample")
			}
		})
	}
}

func TestHandlerBoundsConcurrentBuilds(t *testing.T) {
	h := Handler(nil).(*handler)
	entered := make(chan struct{})
	release := make(chan struct{})
	h.build = func(w io.Writer) error {
		entered <- struct{}{}
		<-release
		_, err := w.Write([]byte("profile"))
		return err
	}
	get := func() *http.Response {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/finalizers", nil))
		return rec.Result()
	}

	var wg sync.WaitGroup
	statuses := make(chan int, MaxConcurrentBuilds)
	for range MaxConcurrentBuilds {
		wg.Go(func() { statuses <- get().StatusCode })
	}
	for range MaxConcurrentBuilds {
		<-entered // every build slot is taken
	}
	res := get()
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("request beyond %d builds: status %d, want 503", MaxConcurrentBuilds, res.StatusCode)
	}
	if got := res.Header.Get("Retry-After"); got != "1" {
		t.Errorf("Retry-After %q, want 1", got)
	}
	close(release)
	wg.Wait()
	close(statuses)
	for s := range statuses {
		if s != http.StatusOK {
			t.Errorf("a build in a slot ended with status %d", s)
		}
	}
	// The slots are free again.
	go func() { <-entered }()
	if s := get().StatusCode; s != http.StatusOK {
		t.Errorf("after the builds: status %d, want 200", s)
	}
}

func TestHandlerBuildError(t *testing.T) {
	h := Handler(nil).(*handler)
	h.build = func(io.Writer) error { return errors.New("boom") }
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
	if rec.Code != http.StatusInternalServerError {
		t.Errorf("status %d, want 500", rec.Code)
	}
	if ct := rec.Header().Get("Content-Disposition"); ct != "" {
		t.Errorf("a failed build is served as a download (%q)", ct)
	}
}

// TestHandlerConcurrent scrapes a real server from many goroutines while
// the ledger changes; run with -race.
func TestHandlerConcurrent(t *testing.T) {
	w := plantedWatcher(t)
	srv := httptest.NewServer(Handler(w))
	defer srv.Close()
	stop := make(chan struct{})
	registering := make(chan struct{})
	go func() {
		defer close(registering)
		for {
			select {
			case <-stop:
				return
			default:
				churn(w, 10)
			}
		}
	}()
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[int]int{}
	for range 8 {
		wg.Go(func() {
			for range 5 {
				res, err := srv.Client().Get(srv.URL)
				if err != nil {
					t.Error(err)
					return
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode == http.StatusOK {
					if _, err := profile.ParseData(body); err != nil {
						t.Error(err)
					}
				}
				mu.Lock()
				counts[res.StatusCode]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(stop)
	<-registering
	if counts[http.StatusOK] == 0 || counts[http.StatusOK]+counts[http.StatusServiceUnavailable] != 40 {
		t.Errorf("statuses %v: want 200s, and 503s only", counts)
	}
	srv.Client().CloseIdleConnections()
}
