package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The registration hot path: the functions a SetFinalizer or AddCleanup
// call runs through, by file of package finalizerwatch. Growing the
// address table (objmap.go) is amortized and left out.
var hotPath = map[string][]string{
	"setfinalizer.go": {"SetFinalizer", "setFinalizer"},
	"cleanup.go":      {"AddCleanup", "AddCleanupTo", "addCleanup"},
	"watcher.go":      {"siteFor", "account"},
}

// knownEscapes are heap allocations on the hot path beyond the one it
// needs, each with what would remove it. The test fails if one goes
// away (delete it here then) and if any other appears.
var knownEscapes = map[string]string{
	// None: AddCleanup once passed the method expression
	// (*cleanupRec[S]).run, a closure over the generic dictionary
	// allocated on every call; it now passes the plain runCleanup.
}

// diagnostic is one line of the compiler's -m output that reports an
// allocation moving to the heap.
type diagnostic struct {
	file      string // base name
	line, col int
	msg       string
}

// TestRegistrationEscapes checks, with the compiler's escape analysis,
// that registering allocates nothing on the heap but the one record
// AddCleanup needs (cleanupRec, which the runtime holds as the cleanup's
// argument). It builds finalizerwatch (for the non-generic code) and
// bench/internal/escapeprobe (where the generic AddCleanup is instantiated
// and so compiled) with -gcflags=-m=2, keeps the lines reporting an
// allocation that escapes or a variable moved to the heap, and locates
// them by file:line:col in the hot-path functions, outside the arguments
// of panic calls. The wording of the messages beyond those two phrases
// does not matter; -m=2 because -m=1 leaves out compiler-generated
// closures.
func TestRegistrationEscapes(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Skipf("not in the module's source tree: %v", err)
	}
	const module = "github.com/gcprobe/probe"
	// Built from bench/, a module of its own that requires the root
	// module (replaced by this checkout).
	cmd := exec.Command(goTool, "build",
		"-gcflags="+module+"/finalizerwatch=-m=2",
		"-gcflags="+module+"/bench/internal/escapeprobe=-m=2",
		module+"/finalizerwatch", "./internal/escapeprobe")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	diags := parseEscapes(out)

	known := maps.Clone(knownEscapes)
	var escapes []string // hot-path allocation sites, "file:line:col"
	want := map[string]bool{}
	seen := map[string]bool{}
	for file, funcs := range hotPath {
		path := filepath.Join(root, "finalizerwatch", file)
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		hot, missing := funcRanges(fset, f, funcs)
		if len(missing) > 0 {
			t.Fatalf("%s: no function %v: update hotPath", file, missing)
		}
		panics := panicRanges(fset, f)
		for _, d := range diags {
			if d.file != file {
				continue
			}
			seen[file] = true
			if !within(hot, d.line, d.col) || within(panics, d.line, d.col) {
				continue
			}
			site := fmt.Sprintf("%s:%d:%d", file, d.line, d.col)
			if slices.Contains(escapes, site) {
				continue
			}
			escapes = append(escapes, site)
			expr := exprAt(fset, f, src, d.line, d.col)
			key := file + ":" + expr
			switch {
			case strings.HasPrefix(expr, "&cleanupRec[") && file == "cleanup.go":
				want[site] = true // the record: needed
			case known[key] != "":
				want[site] = true
				t.Logf("known extra allocation at %s, %s: %s", site, expr, known[key])
				delete(known, key)
			default:
				t.Errorf("%s: %s (%s) moves to the heap on the registration path", site, d.msg, expr)
			}
		}
	}
	for _, file := range []string{"setfinalizer.go", "cleanup.go"} {
		if !seen[file] {
			t.Errorf("no escape diagnostics for %s in the compiler's output: has its format changed?\n%.3000s", file, out)
		}
	}
	if len(want) == 0 {
		t.Error("the cleanupRec allocation was not reported: the check no longer sees the hot path")
	}
	for key, why := range known {
		t.Errorf("known escape %s (%s) is gone: remove it from knownEscapes", key, why)
	}
	t.Logf("hot-path allocation sites: %v", escapes)
}

var diagRE = regexp.MustCompile(`^(.*\.go):(\d+):(\d+): (\S.*)$`)

// parseEscapes returns the diagnostics of out that report a heap
// allocation: "... escapes to heap" or "moved to heap: ...". The lines that
// explain an escape's flow (indented after the position) are left out.
func parseEscapes(out []byte) []diagnostic {
	var ds []diagnostic
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		m := diagRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		msg := m[4]
		if !strings.Contains(msg, "escapes to heap") && !strings.HasPrefix(msg, "moved to heap") {
			continue
		}
		if !strings.Contains(filepath.ToSlash(m[1]), "finalizerwatch/") {
			continue
		}
		line, _ := strconv.Atoi(m[2])
		col, _ := strconv.Atoi(m[3])
		ds = append(ds, diagnostic{file: filepath.Base(m[1]), line: line, col: col, msg: msg})
	}
	return ds
}

// span is a source range by line and column, both inclusive at start.
type span struct{ from, to token.Position }

func within(spans []span, line, col int) bool {
	for _, s := range spans {
		after := line > s.from.Line || line == s.from.Line && col >= s.from.Column
		before := line < s.to.Line || line == s.to.Line && col < s.to.Column
		if after && before {
			return true
		}
	}
	return false
}

// funcRanges returns the bodies of the functions and methods of f with
// the given names, and the names it found none for.
func funcRanges(fset *token.FileSet, f *ast.File, names []string) (out []span, missing []string) {
	found := map[string]bool{}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok || fd.Body == nil || !slices.Contains(names, fd.Name.Name) {
			continue
		}
		found[fd.Name.Name] = true
		out = append(out, span{fset.Position(fd.Body.Pos()), fset.Position(fd.Body.End())})
	}
	for _, n := range names {
		if !found[n] {
			missing = append(missing, n)
		}
	}
	return out, missing
}

// panicRanges returns the argument lists of f's panic calls: what a panic
// message costs is paid only when it panics.
func panicRanges(fset *token.FileSet, f *ast.File) []span {
	var out []span
	ast.Inspect(f, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "panic" {
				out = append(out, span{fset.Position(c.Lparen), fset.Position(c.Rparen)})
			}
		}
		return true
	})
	return out
}

// exprAt returns the source text of the innermost expression of f that
// holds line:col, so that a diagnostic can be named by the code it points
// at (the compiler points at an operator or a selector's dot as often as
// at an expression's start).
func exprAt(fset *token.FileSet, f *ast.File, src []byte, line, col int) string {
	var best ast.Expr
	ast.Inspect(f, func(n ast.Node) bool {
		e, ok := n.(ast.Expr)
		if !ok {
			return true
		}
		s := span{fset.Position(e.Pos()), fset.Position(e.End())}
		if !within([]span{s}, line, col) {
			return true
		}
		if best == nil || e.End()-e.Pos() <= best.End()-best.Pos() {
			best = e
		}
		return true
	})
	if best == nil {
		return "?"
	}
	return string(src[fset.Position(best.Pos()).Offset:fset.Position(best.End()).Offset])
}

func TestParseEscapes(t *testing.T) {
	out := []byte(`# github.com/gcprobe/probe/finalizerwatch
finalizerwatch/cleanup.go:119:7: &cleanupRec[go.shape.int]{...} escapes to heap
./finalizerwatch/cleanup.go:119:7: &cleanupRec[go.shape.int]{...} escapes to heap in addCleanup[...]:
./finalizerwatch/cleanup.go:119:7:   flow: {heap} ← r:
./finalizerwatch/cleanup.go:119:7:     from r (spill) at ./finalizerwatch/cleanup.go:119:7
finalizerwatch/setfinalizer.go:80:2: moved to heap: e
finalizerwatch/setfinalizer.go:81:2: e does not escape
/usr/local/go/src/runtime/mcleanup.go:122:13: new([2]uintptr) escapes to heap
finalizerwatch/watcher.go:12:3: func literal escapes to heap (wording changed)
`)
	got := parseEscapes(out)
	want := []diagnostic{
		{"cleanup.go", 119, 7, "&cleanupRec[go.shape.int]{...} escapes to heap"},
		{"cleanup.go", 119, 7, "&cleanupRec[go.shape.int]{...} escapes to heap in addCleanup[...]:"},
		{"setfinalizer.go", 80, 2, "moved to heap: e"},
		{"watcher.go", 12, 3, "func literal escapes to heap (wording changed)"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("parseEscapes:\ngot  %v\nwant %v", got, want)
	}
}
