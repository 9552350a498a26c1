package main

import (
	"bytes"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestDepsModule prepares, with -deps, the build of testdata/deps/app: a
// module that depends on a local module registering finalizers and a
// cleanup (testdata/deps/regs, through a replace; generics, a file behind
// a build tag, a //go:build ignore file, a kept runtime.Cleanup) and on
// github.com/klauspost/compress/zstd, whose DecodeTo sets a finalizer. The
// app runs the collector until every callback has run and prints the
// ledger's sites and the Prometheus collector's unwatched counts.
//
// Without the flags the app builds and every registration counts as
// unwatched; with them each is counted at its own file and line (the
// module cache's for zstd) and nothing is unwatched. The prepared files
// are the same bytes when made again, and a second run reuses them.
func TestDepsModule(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: builds and runs a module three times (20 to 90 s); drop -short to run it")
	}
	start := time.Now()
	x := newDepsFixture(t)
	gocmd, bin, app, regs, env, tmp := x.gocmd, x.bin, x.app, x.regs, x.env, x.tmp

	zstdFile := filepath.Join(x.modcache, "github.com/klauspost/compress@v1.20.1/zstd/simple_go124.go")
	lines := map[string]string{ // marker: want file:line
		"zstd":  fmt.Sprintf("%s:%d", zstdFile, lineOf(t, zstdFile, "runtime.SetFinalizer(dec,")),
		"dial":  fmt.Sprintf("%s:%d", filepath.Join(regs, "regs.go"), depsMarkerLine(t, filepath.Join(regs, "regs.go"), "dial")),
		"box":   fmt.Sprintf("%s:%d", filepath.Join(regs, "regs.go"), depsMarkerLine(t, filepath.Join(regs, "regs.go"), "box")),
		"extra": fmt.Sprintf("%s:%d", filepath.Join(regs, "extra.go"), depsMarkerLine(t, filepath.Join(regs, "extra.go"), "extra")),
		"kept":  fmt.Sprintf("%s:%d", filepath.Join(regs, "kept.go"), depsMarkerLine(t, filepath.Join(regs, "kept.go"), "kept")),
		"own":   fmt.Sprintf("%s:%d", filepath.Join(app, "main.go"), depsMarkerLine(t, filepath.Join(app, "main.go"), "own")),
		"xtest": fmt.Sprintf("%s:%d", filepath.Join(app, "main_test.go"), depsMarkerLine(t, filepath.Join(app, "main_test.go"), "xtest")),
	}

	// Without the flags: it builds, and the runtime ran every callback
	// outside the ledger.
	out := mustRun(t, app, env, gocmd, "run", "-tags=regsextra", ".")
	if want := "unwatched finalizer=4 cleanup=1\n"; out != want {
		t.Fatalf("the app built without the flags printed:\n%s\nwant:\n%s", out, want)
	}

	// Prepare the build.
	dir := filepath.Join(tmp, "prepared")
	prepare := func() (string, []string) {
		t.Helper()
		out := mustRun(t, app, env, bin, "-deps", dir, "-tags=regsextra", ".")
		ls := strings.Split(strings.TrimSpace(out), "\n")
		return out, strings.Fields(ls[len(ls)-1])
	}
	out, flags := prepare()
	t.Logf("finalizercheck -deps:\n%s", out)
	wantFlags := []string{"-modfile=" + filepath.Join(dir, "go.mod"), "-tags=regsextra", "-overlay=" + filepath.Join(dir, "overlay.json")}
	if !slices.Equal(flags, wantFlags) {
		t.Errorf("last line: %q, want %q", flags, wantFlags)
	}
	for _, want := range []string{
		"watched " + lines["zstd"] + "\n",
		"watched " + lines["dial"] + "\n",
		"watched " + lines["extra"] + "\n",
		"watched " + lines["xtest"] + "\n",
		"unwatched " + lines["kept"] + ":",
		"skipped github.com/gcprobe/probe/finalizerwatch: part of gcprobe",
		"wrote " + filepath.Join(dir, "mod", "github.com", "klauspost", "compress@v1.20.1") + " ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("finalizercheck -deps output lacks %q", want)
		}
	}

	// Copies are complete: every file of regs is there, the same bytes
	// unless rewritten; the //go:build ignore file is left alone.
	copied := filepath.Join(dir, "mod", "example.com", "regs@v0.0.0")
	for name, orig := range snapshot(t, regs) {
		got, err := os.ReadFile(filepath.Join(copied, name))
		if err != nil {
			t.Errorf("the copy of regs lacks %s: %v", name, err)
			continue
		}
		rewritten := name == "regs.go" || name == "extra.go"
		if rewritten == bytes.Equal(got, orig) {
			t.Errorf("%s in the copy of regs: rewritten %v, want %v:\n%s", name, !rewritten, rewritten, got)
		}
	}

	// With the flags: each registration at its own line, nothing
	// unwatched.
	out = mustRun(t, app, env, gocmd, slices.Concat([]string{"run"}, flags, []string{"."})...)
	want := strings.Join([]string{
		"site cleanup " + lines["box"] + " registered=1 executed=1",
		"site finalizer " + lines["zstd"] + " registered=1 executed=1",
		"site finalizer " + lines["own"] + " registered=1 executed=1",
		"site finalizer " + lines["extra"] + " registered=1 executed=1",
		"site finalizer " + lines["dial"] + " registered=1 executed=1",
	}, "\n")
	want = sortLines(want) + "unwatched finalizer=0 cleanup=0\n"
	if out != want {
		t.Errorf("the app built with %q printed:\n%s\nwant:\n%s", flags, out, want)
	}

	// go test too: the external test file, rewritten, builds.
	mustRun(t, app, env, gocmd, slices.Concat([]string{"test"}, flags, []string{"-count=1", "."})...)

	// A second run reuses every prepared file: same bytes, not written.
	first := snapshot(t, dir)
	mtimes := modTimes(t, dir)
	// ... and removes a copy an earlier run made that this one does not need.
	stale := filepath.Join(dir, "mod", "example.com", "gone@v1.0.0")
	if err := os.MkdirAll(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(stale, stampName), "x\n")
	out, _ = prepare()
	if _, err := os.Stat(stale); !os.IsNotExist(err) || !strings.Contains(out, "removed "+stale+" ") {
		t.Errorf("the stale copy %s is still there (%v), or the output does not say it was removed:\n%s", stale, err, out)
	}
	if strings.Contains(out, "wrote ") {
		t.Errorf("the second run wrote files:\n%s", out)
	}
	if !strings.Contains(out, "reused "+filepath.Join(dir, "mod", "github.com", "klauspost", "compress@v1.20.1")+" ") {
		t.Errorf("the second run does not say it reused the zstd copy:\n%s", out)
	}
	if got := modTimes(t, dir); !maps.Equal(got, mtimes) {
		t.Errorf("the second run touched prepared files")
	}
	// Made again from nothing: the same bytes.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	prepare()
	second := snapshot(t, dir)
	if !maps.EqualFunc(first, second, bytes.Equal) {
		for name := range first {
			if !bytes.Equal(first[name], second[name]) {
				t.Errorf("%s differs when prepared again", name)
			}
		}
		t.Errorf("prepared twice from the same input: %d and %d files, not the same bytes", len(first), len(second))
	}
	t.Logf("prepared, built and ran the app in %v", time.Since(start).Round(time.Millisecond))
}

// depsFixture is testdata/deps copied into a temporary directory, the
// app requiring this repository through a replace, and finalizercheck
// built.
type depsFixture struct {
	gocmd, bin, tmp, app, regs, modcache string
	env                                  []string // for the go command in the app
}

func newDepsFixture(t *testing.T) *depsFixture {
	t.Helper()
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("skipping: the go command is not on PATH, and this test builds and runs modules with it")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	x := &depsFixture{gocmd: gocmd, tmp: tmp, env: []string{"GOWORK=off", "GOFLAGS=-mod=mod"}}
	const zstdMod = "github.com/klauspost/compress@v1.20.1"
	if out, err := run(tmp, []string{"GOWORK=off"}, gocmd, "mod", "download", zstdMod); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("go mod download %s: %v\n%s", zstdMod, err, out)
		}
		t.Skipf("skipping: %s is not in the module cache and cannot be downloaded here (%v); CI has the module proxy", zstdMod, err)
	}
	x.modcache = strings.TrimSpace(mustRun(t, tmp, nil, gocmd, "env", "GOMODCACHE"))

	x.bin = filepath.Join(tmp, "finalizercheck")
	mustRun(t, ".", nil, gocmd, "build", "-o", x.bin, ".")

	x.app, x.regs = filepath.Join(tmp, "app"), filepath.Join(tmp, "regs")
	// The go.mod and go.sum files are kept as *.in: a go.mod in the
	// tree would make a module of testdata (and the repository lists its
	// modules). The app's were made with go mod tidy.
	for _, d := range []string{"app", "regs"} {
		dst := filepath.Join(tmp, d)
		copyDir(t, filepath.Join("testdata", "deps", d), dst)
		for _, f := range []string{"go.mod", "go.sum"} {
			if err := os.Rename(filepath.Join(dst, f+".in"), filepath.Join(dst, f)); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
		}
	}
	mustRun(t, x.app, x.env, gocmd, "mod", "edit", "-replace=github.com/gcprobe/probe="+root)
	// The root module's sums too, in case its requirements moved since
	// the app's go.sum was made.
	if sum, err := os.ReadFile(filepath.Join(root, "go.sum")); err == nil {
		appSum, err := os.ReadFile(filepath.Join(x.app, "go.sum"))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(x.app, "go.sum"), string(appSum)+string(sum))
	}
	return x
}

// TestDepsVendored prepares the app's build once it vendors its
// dependencies: the command says that the prepared build reads the module
// cache instead, prints -mod=mod with the flags, and the build counts the
// registrations at the module cache's lines.
func TestDepsVendored(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: vendors, builds and runs a module (10 to 40 s); drop -short to run it")
	}
	x := newDepsFixture(t)
	mustRun(t, x.app, x.env, x.gocmd, "mod", "vendor")
	env := []string{"GOWORK=off"} // vendor mode by default, as the user's build
	if out := mustRun(t, x.app, env, x.gocmd, "run", "."); out != "unwatched finalizer=3 cleanup=1\n" {
		t.Fatalf("the vendored app printed:\n%s", out)
	}
	out := mustRun(t, x.app, env, x.bin, "-deps", filepath.Join(x.tmp, "prepared"), ".")
	if !strings.Contains(out, "note: the main module vendors its dependencies") {
		t.Errorf("finalizercheck -deps does not say the module vendors:\n%s", out)
	}
	ls := strings.Split(strings.TrimSpace(out), "\n")
	flags := strings.Fields(ls[len(ls)-1])
	if !slices.Contains(flags, "-mod=mod") {
		t.Fatalf("flags %q lack -mod=mod", flags)
	}
	out = mustRun(t, x.app, env, x.gocmd, slices.Concat([]string{"run"}, flags, []string{"."})...)
	zstdFile := filepath.Join(x.modcache, "github.com/klauspost/compress@v1.20.1/zstd/simple_go124.go")
	for _, want := range []string{
		fmt.Sprintf("site finalizer %s:%d registered=1 executed=1\n", zstdFile, lineOf(t, zstdFile, "runtime.SetFinalizer(dec,")),
		"unwatched finalizer=0 cleanup=0\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the vendored app built with %q printed:\n%s\nwant a line %q", flags, out, want)
		}
	}
}

func TestDepsArgs(t *testing.T) {
	for _, tt := range []struct {
		name string
		give []string
		want string // error text, "" for none
	}{
		{name: "no dir", give: []string{"-deps"}, want: "flag needs an argument"},
		{name: "empty dir", give: []string{"-deps="}, want: "-deps needs a directory"},
		{name: "flag after packages", give: []string{"-deps", "d", "./...", "-tags=x"}, want: "flag -tags=x after the packages"},
		{name: "-deps after packages", give: []string{"./...", "-deps", "d"}, want: "flag -deps after the packages"},
		{name: "unknown flag", give: []string{"-deps", "d", "-fix", "."}, want: "flag provided but not defined: -fix"},
		{name: "ok", give: []string{"-deps", "d", "-tags", "a,b", "./..."}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			c, err := parseDepsArgs(tt.give, &stderr)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !filepath.IsAbs(c.dir) || c.tags != "a,b" || !slices.Equal(c.patterns, []string{"./..."}) {
					t.Errorf("got %+v", c)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
	// The command names itself and exits non-zero.
	var stdout, stderr bytes.Buffer
	if code := depsMain([]string{"-deps="}, &stdout, &stderr); code != 1 || !strings.HasPrefix(stderr.String(), "finalizercheck -deps: ") {
		t.Errorf("depsMain with no directory: status %d, stderr %q", code, stderr.String())
	}
}

// TestDepsRefuses checks the environments -deps cannot prepare a build
// for: each fails, naming the command and the problem.
func TestDepsRefuses(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("skipping: the go command is not on PATH")
	}
	mod := t.TempDir()
	writeFile(t, filepath.Join(mod, "go.mod"), "module example.com/m\n\ngo 1.26.0\n")
	writeFile(t, filepath.Join(mod, "go.work"), "go 1.26.0\n\nuse .\n")
	for _, tt := range []struct {
		name, dir string
		env       map[string]string
		want      string
	}{
		{name: "workspace", dir: mod, env: map[string]string{"GOWORK": filepath.Join(mod, "go.work")},
			want: "the go command refuses -modfile in workspace mode: run this and the build with GOWORK=off"},
		{name: "no module", dir: t.TempDir(), env: map[string]string{"GOWORK": "off"}, want: "not in a module"},
		{name: "modfile in GOFLAGS", dir: mod, env: map[string]string{"GOWORK": "off", "GOFLAGS": "-modfile=x.mod"},
			want: "GOFLAGS sets -modfile=x.mod"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Chdir(tt.dir)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var stdout, stderr bytes.Buffer
			code := depsMain([]string{"-deps", t.TempDir(), "."}, &stdout, &stderr)
			if code != 1 || !strings.HasPrefix(stderr.String(), "finalizercheck -deps: ") || !strings.Contains(stderr.String(), tt.want) {
				t.Errorf("status %d, stderr %q; want 1 and %q", code, stderr.String(), tt.want)
			}
		})
	}
}

func TestIsDepsFlag(t *testing.T) {
	for give, want := range map[string]bool{"-deps": true, "--deps": true, "-deps=x": true, "-depsx": false, "./deps": false, "-fix": false} {
		if got := isDepsFlag(give); got != want {
			t.Errorf("isDepsFlag(%q) = %v, want %v", give, got, want)
		}
	}
}

// depsMarkerLine returns the line of file that ends with "// marker: name".
func depsMarkerLine(t *testing.T, file, name string) int {
	t.Helper()
	return lineOf(t, file, "// marker: "+name)
}

// lineOf returns the first line of file that contains s.
func lineOf(t *testing.T, file, s string) int {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(src), "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("%s has no line containing %q", file, s)
	return 0
}

func sortLines(s string) string {
	ls := strings.Split(s, "\n")
	slices.Sort(ls)
	return strings.Join(ls, "\n") + "\n"
}

// snapshot returns the contents of the files under dir, by relative path.
func snapshot(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	m := make(map[string][]byte)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		rel, _ := filepath.Rel(dir, path)
		m[rel] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func modTimes(t *testing.T, dir string) map[string]time.Time {
	t.Helper()
	m := make(map[string]time.Time)
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		m[path] = info.ModTime()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}
