package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestFixMode(t *testing.T) {
	t.Setenv(fixPassEnv, "")
	tests := []struct {
		name string
		give []string
		want bool
	}{
		{"report", []string{"./..."}, false},
		{"fix", []string{"-fix", "./..."}, true},
		{"double dash", []string{"--fix", "./..."}, true},
		{"fix=true", []string{"-fix=true", "./..."}, true},
		{"fix=false", []string{"-fix=false", "./..."}, false},
		{"fix and diff", []string{"-fix", "-diff", "./..."}, true},
		{"fix with json", []string{"-fix", "-json", "./..."}, false},
		{"after the patterns", []string{"./...", "-fix"}, false},
		{"after --", []string{"--", "-fix"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := fixMode(tt.give); got != tt.want {
				t.Errorf("fixMode(%q) = %v, want %v", tt.give, got, tt.want)
			}
		})
	}
	t.Setenv(fixPassEnv, "1")
	if fixMode([]string{"-fix", "./..."}) {
		t.Error("fixMode is true in the fix pass itself")
	}
}

// TestFixReportsWhatItLeaves runs -fix on testdata/partial, which has one
// call -fix rewrites and two it cannot (a function value, and a
// runtime.Cleanup that is returned), in a module that requires this
// repository. -fix must rewrite the first, exit with status 3 and name the
// other two by file, line (of the fixed file) and reason; the fixed module
// must build; and a second -fix must say the same again.
func TestFixReportsWhatItLeaves(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: builds the command and loads a module (a few seconds); drop -short to run it")
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("skipping: the go command is not on PATH, and this test builds modules with it")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	bin := filepath.Join(tmp, "finalizercheck")
	mustRun(t, ".", nil, gocmd, "build", "-o", bin, ".")
	mod := filepath.Join(tmp, "partial")
	copyDir(t, filepath.Join("testdata", "partial"), mod)
	writeFile(t, filepath.Join(mod, "go.mod"), fmt.Sprintf("module example.com/partial\n\ngo 1.26.0\n\nrequire github.com/gcprobe/probe v0.0.0\n\nreplace github.com/gcprobe/probe => %s\n", root))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(mod, "go.sum"), string(sum))
	env := []string{"GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off"}
	file := filepath.Join(mod, "main.go")

	for round := 1; round <= 2; round++ {
		out, err := run(mod, env, bin, "-fix", "./...")
		if code := exitCode(err); code != 3 {
			t.Fatalf("round %d: -fix: %v (exit status %d), want exit status 3:\n%s", round, err, code, out)
		}
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		fixable := markerLine(t, file, "fixable")
		if line := strings.Split(string(src), "\n")[fixable-1]; !strings.Contains(line, "finalizerwatch.SetFinalizer(") {
			t.Errorf("round %d: the direct call was not rewritten: %s", round, line)
		}
		for _, want := range []string{
			fmt.Sprintf("%s:%d: runtime.SetFinalizer bypasses the finalizerwatch ledger: use finalizerwatch.SetFinalizer (no automatic fix: it is used as a function value", file, markerLine(t, file, "value")),
			fmt.Sprintf("%s:%d: runtime.AddCleanup bypasses the finalizerwatch ledger: use finalizerwatch.AddCleanup (no automatic fix: its result is returned as a runtime.Cleanup", file, markerLine(t, file, "kept")),
			"finalizercheck: -fix left 2 call(s) unfixed (above): rewrite them by hand",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("round %d: -fix output lacks %q:\n%s", round, want, out)
			}
		}
		if strings.Contains(out, fmt.Sprintf("main.go:%d:", fixable)) {
			t.Errorf("round %d: -fix reports the call it fixed:\n%s", round, out)
		}
	}
	mustRun(t, mod, env, gocmd, "build", "./...")

	// Without -fix, the two are reported as before, with the checker's exit
	// status for diagnostics.
	out, err := run(mod, env, bin, "./...")
	if code := exitCode(err); code != 3 || strings.Count(out, "no automatic fix") != 2 {
		t.Errorf("report mode: %v (exit status %d), want status 3 and the two calls:\n%s", err, code, out)
	}
}
