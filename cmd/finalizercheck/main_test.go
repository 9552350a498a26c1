package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestFixModule runs the command as a user would: it builds finalizercheck,
// copies testdata/demo (direct runtime.SetFinalizer and runtime.AddCleanup
// calls, and a main that prints finalizerwatch.Default's sites) into a
// module of its own that requires this repository through a replace
// directive, checks it under go vet -vettool, fixes it with -fix, and runs
// the fixed program: its registrations now appear in the ledger, at the
// lines of the calls that were rewritten.
//
// Everything comes from the module cache: the children run with
// GOFLAGS=-mod=mod and GOPROXY=off, so a missing module fails fast instead
// of reaching for the network.
func TestFixModule(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: builds and runs a module (10 to 60 s); drop -short to run it")
	}
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("skipping: the go command is not on PATH, and this test builds and runs modules with it")
	}
	start := time.Now()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("repository root not found: %v", err)
	}
	tmp := t.TempDir()

	// The analyzer, built as `go install` would.
	bin := filepath.Join(tmp, "finalizercheck")
	mustRun(t, ".", nil, gocmd, "build", "-o", bin, ".")

	// The demo, in a module of its own.
	mod := filepath.Join(tmp, "demo")
	copyDir(t, filepath.Join("testdata", "demo"), mod)
	goMod := fmt.Sprintf("module example.com/demo\n\ngo 1.26.0\n\nrequire github.com/gcprobe/probe v0.0.0\n\nreplace github.com/gcprobe/probe => %s\n", root)
	writeFile(t, filepath.Join(mod, "go.mod"), goMod)
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(mod, "go.sum"), string(sum))
	env := []string{"GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off"}

	// Unfixed, the registrations bypass the ledger.
	if out := mustRun(t, mod, env, gocmd, "run", "."); !strings.HasPrefix(out, "sites: 0\n") {
		t.Fatalf("the unfixed demo sees sites:\n%s", out)
	}
	dial := markerLine(t, filepath.Join(mod, "pool.go"), "dial")
	buffer := markerLine(t, filepath.Join(mod, "pool.go"), "buffer")

	// Reported by the command and under go vet, without changing anything.
	for _, args := range [][]string{
		{bin, "./..."},
		{gocmd, "vet", "-vettool=" + bin, "./..."},
	} {
		out, err := run(mod, env, args[0], args[1:]...)
		if err == nil {
			t.Errorf("%s passed on the unfixed demo:\n%s", strings.Join(args, " "), out)
		} else if args[0] == bin && exitCode(err) != 3 {
			t.Errorf("%s: %v, want exit status 3 for diagnostics", strings.Join(args, " "), err)
		}
		for _, want := range []string{
			fmt.Sprintf("pool.go:%d:2: runtime.SetFinalizer bypasses the finalizerwatch ledger", dial),
			fmt.Sprintf("pool.go:%d:2: runtime.AddCleanup bypasses the finalizerwatch ledger", buffer),
		} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: output lacks %q:\n%s", strings.Join(args, " "), want, out)
			}
		}
	}

	// Fixed: it builds, vets clean, and the ledger sees every registration
	// at its line.
	mustRun(t, mod, env, bin, "-fix", "./...")
	fixed, err := os.ReadFile(filepath.Join(mod, "pool.go"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(fixed, []byte("runtime")) || !bytes.Contains(fixed, []byte(`"github.com/gcprobe/probe/finalizerwatch"`)) {
		t.Errorf("pool.go after -fix still uses runtime or lacks the finalizerwatch import:\n%s", fixed)
	}
	t.Logf("pool.go after -fix:\n%s", fixed)
	// The fix moved the lines: find them again.
	dial = markerLine(t, filepath.Join(mod, "pool.go"), "dial")
	buffer = markerLine(t, filepath.Join(mod, "pool.go"), "buffer")
	mustRun(t, mod, env, gocmd, "build", "./...")
	mustRun(t, mod, env, bin, "./...")
	out := mustRun(t, mod, env, gocmd, "run", ".")
	want := fmt.Sprintf("sites: 2\ncleanup pool.go:%d registered=2\nfinalizer pool.go:%d registered=3\n", buffer, dial)
	if out != want {
		t.Errorf("the fixed demo printed:\n%s\nwant:\n%s", out, want)
	}
	t.Logf("built, checked, fixed and ran the demo in %v", time.Since(start).Round(time.Millisecond))
}

// run runs name with args in dir, with env added to this process's
// environment, and returns its combined output.
func run(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func mustRun(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := run(dir, env, name, args...)
	if err != nil {
		t.Fatalf("%s %s (in %s): %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return out
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(to, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		src, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(to, e.Name()), string(src))
	}
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// markerLine returns the 1-based line of file that ends in "// marker: name".
// It is internal/testkit.MarkerLine, copied: this module requires nothing of
// the root module (not even for its tests), so that its go.mod needs no
// replace directive and `go install ...@version` accepts it.
func markerLine(t testing.TB, file, name string) int {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(src), "\n") {
		if strings.HasSuffix(l, "// marker: "+name) {
			return i + 1
		}
	}
	t.Fatalf("no marker %q in %s", name, file)
	return 0
}

// TestModeHelp runs each mode with a help flag, or another flag, where its
// directory goes, as the command's -h suggests ("-runtime -h for more",
// "finalizercheck -deps -h for more"): the mode's usage is printed, a
// flag-looking directory is refused, and nothing is created.
func TestModeHelp(t *testing.T) {
	for _, tt := range []struct {
		name string
		give []string
		want int    // exit status
		err  string // in standard error
	}{
		{"-runtime -h", []string{"-runtime", "-h"}, 0, "usage: finalizercheck -runtime DIR"},
		{"-deps -h", []string{"-deps", "-h"}, 0, "usage: finalizercheck -deps DIR"},
		{"-deps -help", []string{"-deps", "-help"}, 0, "usage: finalizercheck -deps DIR"},
		{"-deps --help", []string{"-deps", "--help"}, 0, "usage: finalizercheck -deps DIR"},
		{"-deps=-h", []string{"-deps=-h", "./..."}, 0, "usage: finalizercheck -deps DIR"},
		{"--deps -h after flags", []string{"-tags", "x", "--deps", "-h"}, 0, "usage: finalizercheck -deps DIR"},
		{"-deps -tags", []string{"-deps", "-tags", "x", "./..."}, 1, "-deps takes a directory, not the flag -tags"},
		{"view -h", []string{"view", "-h"}, 0, "usage: finalizercheck view"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var ran bool
			code, stdout, stderr := runInEmptyDir(t, func(stdout, stderr io.Writer) int {
				code, ok := modeMain(tt.give, stdout, stderr)
				ran = ok
				return code
			})
			if !ran || code != tt.want || !strings.Contains(stderr, tt.err) || stdout != "" {
				t.Errorf("finalizercheck %s: mode ran %v, exit status %d, stdout %q, stderr:\n%s\nwant exit status %d, nothing on stdout, %q on stderr",
					strings.Join(tt.give, " "), ran, code, stdout, stderr, tt.want, tt.err)
			}
		})
	}
	if _, ok := modeMain([]string{"-fix", "./..."}, io.Discard, io.Discard); ok {
		t.Error("modeMain ran a mode for -fix ./..., the checker's")
	}
}
