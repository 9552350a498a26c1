package analyzer

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/types"
	"slices"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
)

const (
	modulePath = "github.com/gcprobe/probe"
	watchPath  = modulePath + "/finalizerwatch"
)

// Analyzer reports references to runtime.SetFinalizer and
// runtime.AddCleanup and, for direct calls, suggests the finalizerwatch
// call that replaces them. Add it to a multichecker or a gopls-style
// driver alongside other analyzers; cmd/finalizercheck runs it alone.
var Analyzer = &analysis.Analyzer{
	Name:     "finalizercheck",
	Doc:      doc,
	Requires: []*analysis.Analyzer{inspect.Analyzer},
	Run:      run,
}

const doc = `report runtime.SetFinalizer and runtime.AddCleanup calls that bypass finalizerwatch

Registrations made with runtime.SetFinalizer and runtime.AddCleanup are
invisible to the finalizerwatch ledger that gcprobe and finalizertest read.
finalizercheck reports every reference to those two functions and, for a
direct call, suggests rewriting it to finalizerwatch.SetFinalizer or
finalizerwatch.AddCleanup (github.com/gcprobe/probe/finalizerwatch), adding
that import and dropping the runtime import if nothing else uses it.

A call of runtime.AddCleanup whose runtime.Cleanup result is kept (stored
in a typed variable or field, returned, passed on) is reported without a
fix: finalizerwatch.AddCleanup returns a finalizerwatch.Cleanup, so the
declared type must change with the call. A result that is discarded, or
only ever used to call Stop, is fixed. Function values (f :=
runtime.SetFinalizer) are reported without a fix.`

// finding is one reference to runtime.SetFinalizer or runtime.AddCleanup.
type finding struct {
	name  string          // "SetFinalizer" or "AddCleanup"
	fun   ast.Expr        // runtime.X, or X through a dot import: what the fix replaces
	spec  *ast.ImportSpec // the import of runtime that fun goes through
	noFix string          // why no fix is offered; "" when one is
}

func run(pass *analysis.Pass) (any, error) {
	if skipPackage(pass.Pkg.Path()) {
		return nil, nil
	}
	insp := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	uses := countCleanupUses(pass, insp)

	byFile := make(map[*ast.File][]*finding)
	insp.WithStack([]ast.Node{(*ast.Ident)(nil)}, func(n ast.Node, push bool, stack []ast.Node) bool {
		if !push {
			return true
		}
		id := n.(*ast.Ident)
		name := runtimeTarget(pass.TypesInfo.Uses[id])
		if name == "" {
			return true
		}
		file := stack[0].(*ast.File)
		if f := classify(pass, file, id, name, stack, uses); f != nil {
			byFile[file] = append(byFile[file], f)
		}
		return true
	})
	for _, file := range pass.Files {
		if fs := byFile[file]; len(fs) > 0 {
			reportFile(pass, file, fs)
		}
	}
	return nil, nil
}

// skipPackage reports whether path is one of gcprobe's own packages, which
// use the runtime functions on purpose (finalizerwatch wraps them; tests
// compare against them). Packages under a testdata directory are checked.
func skipPackage(path string) bool {
	if i := strings.LastIndex(path, "/vendor/"); i >= 0 {
		path = path[i+len("/vendor/"):]
	}
	path = strings.TrimSuffix(path, "_test") // external test packages
	if path != modulePath && !strings.HasPrefix(path, modulePath+"/") {
		return false
	}
	return !slices.Contains(strings.Split(path, "/"), "testdata")
}

// runtimeTarget returns "SetFinalizer" or "AddCleanup" if obj is that
// function of package runtime, and "" otherwise.
func runtimeTarget(obj types.Object) string {
	fn, ok := obj.(*types.Func)
	if !ok || fn.Pkg() == nil || fn.Pkg().Path() != "runtime" {
		return ""
	}
	fn = fn.Origin()
	if fn.Signature().Recv() != nil {
		return ""
	}
	switch fn.Name() {
	case "SetFinalizer", "AddCleanup":
		return fn.Name()
	}
	return ""
}

// classify builds the finding for the identifier id (the last element of
// stack, whose first is file), which refers to runtime.name.
func classify(pass *analysis.Pass, file *ast.File, id *ast.Ident, name string, stack []ast.Node, uses cleanupUses) *finding {
	f := &finding{name: name, fun: id}
	i := len(stack) - 1 // index of the expression built up so far
	if sel, ok := stack[i-1].(*ast.SelectorExpr); ok && sel.Sel == id {
		x, _ := sel.X.(*ast.Ident)
		pn, _ := pass.TypesInfo.Uses[x].(*types.PkgName)
		if pn == nil {
			return nil // not a package-qualified reference: cannot happen for a function
		}
		f.fun, f.spec = sel, importSpecOf(pass, file, pn)
		i--
	} else {
		f.spec = dotImportOf(file)
	}
	// Climb an explicit instantiation, runtime.AddCleanup[T, S], and
	// parentheses, to see whether the function is called.
	e := stack[i]
	i--
	switch p := stack[i].(type) {
	case *ast.IndexExpr:
		if p.X == e {
			e, i = p, i-1
		}
	case *ast.IndexListExpr:
		if p.X == e {
			e, i = p, i-1
		}
	}
	for {
		p, ok := stack[i].(*ast.ParenExpr)
		if !ok {
			break
		}
		e, i = p, i-1
	}
	call, ok := stack[i].(*ast.CallExpr)
	if !ok || call.Fun != e {
		f.noFix = "it is used as a function value, not called; replace it by hand"
		return f
	}
	if name == "AddCleanup" {
		f.noFix = resultUse(pass, call, stack[:i+1], uses)
	}
	if f.spec == nil && f.noFix == "" {
		// Not through an import of this file (cgo or other generated
		// code): still worth reporting, but there is no import to edit.
		f.noFix = "the reference does not go through an import of runtime in this file"
	}
	return f
}

// importSpecOf returns the import declaration of file that declares pn.
func importSpecOf(pass *analysis.Pass, file *ast.File, pn *types.PkgName) *ast.ImportSpec {
	for _, spec := range file.Imports {
		if pkgNameOf(pass, spec) == pn {
			return spec
		}
	}
	return nil
}

func pkgNameOf(pass *analysis.Pass, spec *ast.ImportSpec) *types.PkgName {
	var obj types.Object
	if spec.Name != nil {
		obj = pass.TypesInfo.Defs[spec.Name]
	} else {
		obj = pass.TypesInfo.Implicits[spec]
	}
	pn, _ := obj.(*types.PkgName)
	return pn
}

// dotImportOf returns file's dot import of runtime.
func dotImportOf(file *ast.File) *ast.ImportSpec {
	for _, spec := range file.Imports {
		if spec.Name != nil && spec.Name.Name == "." && importPath(spec) == "runtime" {
			return spec
		}
	}
	return nil
}

func importPath(spec *ast.ImportSpec) string {
	return strings.Trim(spec.Path.Value, "\"`")
}

// reportFile reports the findings of one file, with fixes that share one
// plan for the file's imports.
func reportFile(pass *analysis.Pass, file *ast.File, findings []*finding) {
	var plan *importPlan
	for _, f := range findings {
		if f.noFix == "" {
			plan = planImports(pass, file, findings)
			break
		}
	}
	for _, f := range findings {
		d := analysis.Diagnostic{
			Pos:      f.fun.Pos(),
			End:      f.fun.End(),
			Category: "finalizerwatch",
		}
		if f.noFix != "" {
			d.Message = fmt.Sprintf("runtime.%s bypasses the finalizerwatch ledger: use finalizerwatch.%s (no automatic fix: %s)", f.name, f.name, f.noFix)
			pass.Report(d)
			continue
		}
		d.Message = fmt.Sprintf("runtime.%s bypasses the finalizerwatch ledger: use finalizerwatch.%s", f.name, f.name)
		edits := []analysis.TextEdit{{Pos: f.fun.Pos(), End: f.fun.End(), NewText: []byte(plan.qualify(f.name))}}
		edits = append(edits, plan.edits(f.spec)...)
		slices.SortFunc(edits, func(a, b analysis.TextEdit) int { return cmp.Compare(a.Pos, b.Pos) })
		d.SuggestedFixes = []analysis.SuggestedFix{{
			Message:   "Use finalizerwatch." + f.name,
			TextEdits: edits,
		}}
		pass.Report(d)
	}
}
