package main

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// localFixture is an app that depends on a locally replaced module,
// example.com/lib, in a temporary directory; the app requires this
// repository through a replace. Nothing is downloaded: the app's other
// requirements are the root module's, already in the module cache.
type localFixture struct {
	gocmd, bin, tmp, app, lib, shared string
	env                               []string
}

// The files of lib: one plain, one that starts with a byte-order mark,
// and one that is a symbolic link to a file outside the module, whose init
// and function the rest of the package needs.
const (
	libGo = `package lib

import "runtime"

// Inited is set by the init of linked.go.
var Inited bool

type T struct{ b [8]byte }

func New() *T {
	t := &T{}
	runtime.SetFinalizer(t, func(*T) {}) // marker: lib
	return t
}

// Both calls NewB and NewL: without linked.go, lib does not build.
func Both() { NewB(); NewL() }
`
	bomGo = "\ufeff" + `package lib

import "runtime"

type B struct{ b [8]byte }

func NewB() *B {
	b := &B{}
	runtime.SetFinalizer(b, func(*B) {}) // marker: bom
	return b
}
`
	linkedGo = `package lib

import "runtime"

func init() { Inited = true }

type L struct{ b [8]byte }

func NewL() *L {
	l := &L{}
	runtime.SetFinalizer(l, func(*L) {}) // marker: linked
	return l
}
`
	localAppGo = `package main

import (
	"fmt"
	"slices"

	"example.com/lib"
	"github.com/gcprobe/probe/finalizerwatch"
)

func main() {
	lib.New()
	lib.Both()
	fmt.Println("inited", lib.Inited)
	var lines []string
	var sn finalizerwatch.Snapshot
	finalizerwatch.Default.Read(&sn, finalizerwatch.ReadOptions{TopK: -1, Fresh: true})
	for _, s := range sn.Top {
		lines = append(lines, fmt.Sprintf("site %s:%d registered=%d", s.Site.File, s.Site.Line, s.Registered))
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
}
`
)

func newLocalFixture(t *testing.T) *localFixture {
	t.Helper()
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("skipping: the go command is not on PATH, and this test builds a module with it")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	x := &localFixture{gocmd: gocmd, tmp: tmp, env: []string{"GOWORK=off", "GOFLAGS="},
		app: filepath.Join(tmp, "app"), lib: filepath.Join(tmp, "lib"), shared: filepath.Join(tmp, "shared")}
	for _, d := range []string{x.app, x.lib, x.shared} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(x.lib, "go.mod"), "module example.com/lib\n\ngo 1.24\n")
	writeFile(t, filepath.Join(x.lib, "lib.go"), libGo)
	writeFile(t, filepath.Join(x.lib, "bom.go"), bomGo)
	writeFile(t, filepath.Join(x.shared, "linked.go"), linkedGo)
	if err := os.Symlink(filepath.Join("..", "shared", "linked.go"), filepath.Join(x.lib, "linked.go")); err != nil {
		t.Skipf("skipping: cannot make a symbolic link here: %v", err)
	}

	// The app's go.mod is the deps fixture's, without the modules this
	// one does not use; its go.sum, that one's and the root's.
	mod, err := os.ReadFile(filepath.Join("testdata", "deps", "app", "go.mod.in"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for l := range strings.Lines(string(mod)) {
		if strings.Contains(l, "klauspost") || strings.HasPrefix(l, "replace ") {
			continue
		}
		lines = append(lines, strings.ReplaceAll(l, "example.com/regs", "example.com/lib"))
	}
	lines = append(lines, "replace example.com/lib => ../lib\n\nreplace github.com/gcprobe/probe => "+root+"\n")
	writeFile(t, filepath.Join(x.app, "go.mod"), strings.Join(lines, ""))
	var sum []byte
	for _, f := range []string{filepath.Join("testdata", "deps", "app", "go.sum.in"), filepath.Join(root, "go.sum")} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sum = append(sum, b...)
	}
	writeFile(t, filepath.Join(x.app, "go.sum"), string(sum))
	writeFile(t, filepath.Join(x.app, "main.go"), localAppGo)

	x.bin = filepath.Join(tmp, "finalizercheck")
	mustRun(t, ".", nil, gocmd, "build", "-o", x.bin, ".")
	return x
}

// Issue 26, items 7 and 8: -deps failed on a file of a dependency that
// starts with a byte-order mark ("does not parse: illegal byte order
// mark"), and left a symbolically linked file out of the copy of a locally
// replaced module (its init lost, or the build failing "undefined"). The
// prepared build now builds and counts each registration at its line, the
// linked file's init included.
func TestDepsByteOrderMarkAndSymlinks(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: builds and runs a module twice (10 to 40 s); drop -short to run it")
	}
	x := newLocalFixture(t)
	site := func(file, marker string) string {
		return fmt.Sprintf("site %s:%d registered=1", filepath.Join(x.lib, file), depsMarkerLine(t, filepath.Join(x.lib, file), marker))
	}
	want := strings.Join([]string{
		"inited true",
		site("bom.go", "bom"),
		site("lib.go", "lib"),
		site("linked.go", "linked"),
	}, "\n") + "\n"
	if out := mustRun(t, x.app, x.env, x.gocmd, "run", "."); out != "inited true\n" {
		t.Fatalf("the app built without the flags printed:\n%s", out)
	}

	dir := filepath.Join(x.tmp, "prepared")
	out := mustRun(t, x.app, x.env, x.bin, "-deps", dir, ".")
	t.Logf("finalizercheck -deps:\n%s", out)
	ls := strings.Split(strings.TrimSpace(out), "\n")
	flags := strings.Fields(ls[len(ls)-1])
	copied := filepath.Join(dir, "mod", "example.com", "lib@v0.0.0")
	if b, err := os.ReadFile(filepath.Join(copied, "linked.go")); err != nil || !bytes.Contains(b, []byte("finalizerwatch.SetFinalizer(l,")) {
		t.Errorf("the copy of lib lacks the linked file, rewritten: %v\n%s", err, b)
	}
	if got := mustRun(t, x.app, x.env, x.gocmd, slices.Concat([]string{"run"}, flags, []string{"."})...); got != want {
		t.Errorf("the app built with %q printed:\n%s\nwant:\n%s", flags, got, want)
	}
}

// Issue 26, item 9: "-deps ." in the module's directory wrote the prepared
// go.mod over the user's (a replace made absolute, under ./mod), though
// -deps promises to leave the module alone. A directory that is the
// module's, or holds its packages, or belongs to another module, is
// refused, and nothing in the module changes.
func TestDepsLeavesTheModuleAlone(t *testing.T) {
	x := newLocalFixture(t)
	writeFile(t, filepath.Join(x.app, "sub.go"), "package main\n")
	if err := os.MkdirAll(filepath.Join(x.app, "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(x.app, "pkg", "pkg.go"), "package pkg\n")
	if err := os.MkdirAll(filepath.Join(x.app, "internal", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(x.app, "internal", "sub", "sub.go"), "package sub\n")
	other := filepath.Join(x.tmp, "other")
	if err := os.MkdirAll(other, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(other, "go.mod"), "module example.com/other\n\ngo 1.26.0\n")
	before := snapshot(t, x.tmp)
	for _, tt := range []struct {
		name, give, want string
	}{
		{name: "the module's directory", give: ".", want: "is the main module's directory"},
		{name: "the module's directory, absolute", give: x.app, want: "is the main module's directory"},
		{name: "a package of the module", give: "pkg", want: "holds Go files of the main module"},
		{name: "a directory above a package", give: "internal", want: "holds Go files of the main module (sub/sub.go)"},
		{name: "another module", give: other, want: "is the go.mod of module example.com/other"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := run(x.app, x.env, x.bin, "-deps", tt.give, ".")
			if exitCode(err) != 1 || !strings.Contains(out, "finalizercheck -deps: ") || !strings.Contains(out, tt.want) {
				t.Errorf("-deps %s: %v\n%s\nwant status 1 and %q", tt.give, err, out, tt.want)
			}
		})
	}
	after := snapshot(t, x.tmp)
	delete(after, "finalizercheck") // built by the fixture, before the snapshot too
	delete(before, "finalizercheck")
	if !maps.EqualFunc(before, after, bytes.Equal) {
		for name := range after {
			if !bytes.Equal(before[name], after[name]) {
				t.Errorf("%s changed or appeared", name)
			}
		}
		for name := range before {
			if _, ok := after[name]; !ok {
				t.Errorf("%s disappeared", name)
			}
		}
	}
	// A directory of its own inside the module, holding no package, is
	// fine: it becomes a module of its own, which the main module's
	// packages leave out.
	out := mustRun(t, x.app, x.env, x.bin, "-deps", ".prepared", ".")
	if !strings.Contains(out, "-modfile="+filepath.Join(x.app, ".prepared", "go.mod")) {
		t.Errorf("-deps .prepared:\n%s", out)
	}
	if b, err := os.ReadFile(filepath.Join(x.app, "go.mod")); err != nil || !bytes.Equal(b, before[filepath.Join("app", "go.mod")]) {
		t.Errorf("the module's go.mod changed: %v\n%s", err, b)
	}
}
