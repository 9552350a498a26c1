package finalizertest

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/gcprobe/probe/finalizerwatch"

	"github.com/gcprobe/probe/internal/testkit"
)

// fakeM stands for *testing.M: its Run runs run.
type fakeM struct {
	run   func() int
	calls int
}

func (m *fakeM) Run() int {
	m.calls++
	return m.run()
}

// hookExit replaces os.Exit and os.Stderr for the test.
func hookExit(t *testing.T) (code *int, out *bytes.Buffer) {
	code, out = new(int), new(bytes.Buffer)
	*code = -1
	oldExit, oldStderr := osExit, stderr
	osExit = func(c int) { *code = c }
	stderr = out
	t.Cleanup(func() { osExit, stderr = oldExit, oldStderr })
	return code, out
}

func TestVerifyTestMain(t *testing.T) {
	var kept []*thing // what the leaking "tests" keep
	t.Cleanup(func() { runtime.KeepAlive(kept) })
	leakLine := testkit.MarkerLine(t, "testmain_test.go", "testmain-leak")

	tests := []struct {
		name     string
		run      func(w *finalizerwatch.Watcher) int
		give     []Option
		wantCode int
		wantRuns int
		wantOut  string // in the standard error output; "" for none
	}{
		{
			name:     "passing tests, no leak",
			run:      func(w *finalizerwatch.Watcher) int { churn(w, 50); return 0 },
			wantCode: 0, wantRuns: 1,
		},
		{
			name: "passing tests that leak",
			run: func(w *finalizerwatch.Watcher) int {
				o := &thing{}
				w.SetFinalizer(o, func(*thing) {}) // marker: testmain-leak
				kept = append(kept, o)
				return 0
			},
			wantCode: 1, wantRuns: 1,
			wantOut: fmt.Sprintf("testmain_test.go:%d\n\tregistered 1, outstanding 1, leaked 1", leakLine),
		},
		{
			name: "failing tests are not checked",
			run: func(w *finalizerwatch.Watcher) int {
				kept = append(kept, plantKept(w, 1)...)
				return 3
			},
			wantCode: 3, wantRuns: 1,
		},
		{
			name:     "invalid option: no test runs",
			run:      func(*finalizerwatch.Watcher) int { return 0 },
			give:     []Option{WithCycles(-1)},
			wantCode: 1, wantRuns: 0,
			wantOut: "finalizertest: WithCycles: must be in [1, 16], got -1",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out := hookExit(t)
			w := newWatcher(t)
			m := &fakeM{run: func() int { return tt.run(w) }}
			VerifyTestMain(m, append(tt.give, WithWatcher(w))...)
			if *code != tt.wantCode || m.calls != tt.wantRuns {
				t.Errorf("exit code %d after %d runs, want %d after %d", *code, m.calls, tt.wantCode, tt.wantRuns)
			}
			if tt.wantOut == "" && out.Len() != 0 || !strings.Contains(out.String(), tt.wantOut) {
				t.Errorf("standard error:\n%s\nwant %q", out, tt.wantOut)
			}
		})
	}
}

// WrapTestingM composes with a helper that runs the tests itself.
func TestWrapTestingM(t *testing.T) {
	_, out := hookExit(t)
	w := newWatcher(t)
	var kept []*thing
	inner := &fakeM{run: func() int { kept = plantKept(w, 2); return 0 }}
	var wrapped TestingM = WrapTestingM(inner, WithWatcher(w))
	if code := wrapped.Run(); code != 1 || inner.calls != 1 {
		t.Errorf("Run returned %d after %d inner runs, want 1 after 1", code, inner.calls)
	}
	if !strings.Contains(out.String(), "registered 2, outstanding 2, leaked 2") {
		t.Errorf("standard error:\n%s", out)
	}
	runtime.KeepAlive(kept)
}
