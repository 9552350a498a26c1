package analyzer_test

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os"
	"slices"
	"testing"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/gcprobe/probe/cmd/finalizercheck/analyzer"
)

// fixed lists the test packages whose fixes are compared with .golden
// files.
var fixed = []string{
	"basic", "sole", "middle", "single", "lone", "renamed", "existing",
	"shadow", "cleanups", "dot", "dotkept", "nonstd",
}

// TestFixes compares the result of all fixes with the .golden files, then
// checks that each fix also compiles when applied alone.
func TestFixes(t *testing.T) {
	results := analysistest.RunWithSuggestedFixes(t, analysistest.TestData(), analyzer.Analyzer, fixed...)
	t.Run("each alone", func(t *testing.T) { eachFixAlone(t, results) })
}

func TestDiagnostics(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), analyzer.Analyzer,
		"values",
		// gcprobe's own packages are not checked (no "want" in them)...
		"github.com/gcprobe/probe/finalizerwatch",
		"github.com/gcprobe/probe/internal/selfuse",
		// ...except under a testdata directory.
		"github.com/gcprobe/probe/examples/testdata/demo",
	)
}

// eachFixAlone checks that each fix leaves a package that compiles when
// applied alone, as an editor applies it: in particular a fix deletes the
// runtime import only when nothing else in the file uses it.
func eachFixAlone(t *testing.T, results []*analysistest.Result) {

	// Every package the test packages import, to type-check them again.
	deps := make(map[string]*types.Package)
	var collect func(p *types.Package)
	collect = func(p *types.Package) {
		if deps[p.Path()] == nil {
			deps[p.Path()] = p
			for _, imp := range p.Imports() {
				collect(imp)
			}
		}
	}
	for _, r := range results {
		collect(r.Action.Package.Types)
	}
	if deps["github.com/gcprobe/probe/finalizerwatch"] == nil {
		t.Fatal("no test package imports finalizerwatch: cannot type-check the fixes")
	}

	tested := 0
	for _, r := range results {
		pkg := r.Action.Package
		for _, d := range r.Action.Diagnostics {
			if len(d.SuggestedFixes) == 0 {
				continue
			}
			tested++
			fix := d.SuggestedFixes[0]
			file := pkg.Fset.File(fix.TextEdits[0].Pos)
			src, err := os.ReadFile(file.Name())
			if err != nil {
				t.Fatal(err)
			}
			edits := slices.Clone(fix.TextEdits)
			slices.SortFunc(edits, func(a, b analysis.TextEdit) int { return cmp.Compare(b.Pos, a.Pos) })
			for _, e := range edits {
				if pkg.Fset.File(e.Pos) != file {
					t.Fatalf("%s: fix edits two files", pkg.Fset.Position(d.Pos))
				}
				start, end := file.Offset(e.Pos), file.Offset(e.End)
				src = slices.Concat(src[:start], e.NewText, src[end:])
			}
			if err := typeCheck(pkg.GoFiles, file.Name(), src, deps); err != nil {
				t.Errorf("%s: %q applied alone: %v\n%s", pkg.Fset.Position(d.Pos), d.Message, err, src)
			}
		}
	}
	if tested < 20 {
		t.Errorf("only %d fixes tested", tested)
	}
}

// typeCheck parses files, with the content of the one named changed
// replaced by src, and type-checks them against deps.
func typeCheck(files []string, changed string, src []byte, deps map[string]*types.Package) error {
	fset := token.NewFileSet()
	var syntax []*ast.File
	for _, name := range files {
		var content any
		if name == changed {
			content = src
		}
		f, err := parser.ParseFile(fset, name, content, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		syntax = append(syntax, f)
	}
	conf := types.Config{Importer: importerFunc(func(path string) (*types.Package, error) {
		if p := deps[path]; p != nil {
			return p, nil
		}
		return nil, fmt.Errorf("no package %q", path)
	})}
	_, err := conf.Check("p", fset, syntax, nil)
	return err
}

type importerFunc func(path string) (*types.Package, error)

func (f importerFunc) Import(path string) (*types.Package, error) { return f(path) }
