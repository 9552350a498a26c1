package analyzer

import (
	"go/ast"
	"go/token"
	"go/types"
	"strconv"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// importPlan is how the fixes of one file refer to finalizerwatch and
// change the file's imports. Every fix of the file carries the same edit
// adding the import, so that the fixes apply alone or together (drivers
// merge identical edits); a fix also deletes the runtime import when its
// call was the import's only use in the file.
type importPlan struct {
	fset   *token.FileSet
	file   *ast.File
	prefix string // "finalizerwatch.", "alias.", or "" through a dot import
	add    string // the import spec to add; "" when finalizerwatch is imported already
	sole   map[*ast.ImportSpec]bool
	// newDecl says to add the import as a declaration of its own rather
	// than parenthesise the last one, "import "runtime"", which all the
	// fixes together leave unused: -fix then ends with a lone
	// import "github.com/gcprobe/probe/finalizerwatch".
	newDecl bool
}

func (p *importPlan) qualify(name string) string { return p.prefix + name }

func planImports(pass *analysis.Pass, file *ast.File, findings []*finding) *importPlan {
	p := &importPlan{fset: pass.Fset, file: file, sole: make(map[*ast.ImportSpec]bool)}
	var fixed []*finding
	for _, f := range findings {
		if f.noFix == "" {
			fixed = append(fixed, f)
		}
	}
	// Resolves reports whether name means obj (nil: nothing) at every
	// fixed reference.
	resolves := func(name string, obj types.Object) bool {
		for _, f := range fixed {
			scope := pass.Pkg.Scope().Innermost(f.fun.Pos())
			if scope == nil {
				return false
			}
			if _, got := scope.LookupParent(name, f.fun.Pos()); got != obj {
				return false
			}
		}
		return true
	}

	// Use an existing import of finalizerwatch if nothing shadows it.
	found := false
	for _, spec := range file.Imports {
		if importPath(spec) != watchPath || spec.Name != nil && spec.Name.Name == "_" {
			continue
		}
		if spec.Name != nil && spec.Name.Name == "." {
			found = true // p.prefix stays ""
			break
		}
		if pn := pkgNameOf(pass, spec); pn != nil && resolves(pn.Name(), pn) {
			p.prefix, found = pn.Name()+".", true
			break
		}
	}
	if !found {
		// Add one, under a name free at every fixed reference.
		name := "finalizerwatch"
		for n := 2; pass.Pkg.Scope().Lookup(name) != nil || !resolves(name, nil); n++ {
			name = "finalizerwatch" + strconv.Itoa(n)
		}
		p.prefix = name + "."
		p.add = strconv.Quote(watchPath)
		if name != "finalizerwatch" {
			p.add = name + " " + p.add
		}
	}

	// A runtime import used once in the file, by a fixed call, goes with
	// that call's fix.
	counts := runtimeUses(pass, file)
	through := make(map[*ast.ImportSpec]int)
	for _, f := range fixed {
		through[f.spec]++
		if counts[f.spec] == 1 {
			p.sole[f.spec] = true
		}
	}
	if last := p.lastImportDecl(); p.add != "" && !last.Lparen.IsValid() {
		spec := last.Specs[0].(*ast.ImportSpec)
		p.newDecl = counts[spec] > 1 && through[spec] == counts[spec]
	}
	return p
}

// runtimeUses counts the references made through each import of runtime
// in file. Through a dot import it counts every unqualified identifier
// that names a runtime object, possibly too many (a struct field key that
// shares a package-level name), never too few: an import is deleted only
// when its count is exactly one.
func runtimeUses(pass *analysis.Pass, file *ast.File) map[*ast.ImportSpec]int {
	specs := make(map[*types.PkgName]*ast.ImportSpec)
	dot := dotImportOf(file)
	for _, spec := range file.Imports {
		if importPath(spec) == "runtime" {
			if pn := pkgNameOf(pass, spec); pn != nil {
				specs[pn] = spec
			}
		}
	}
	counts := make(map[*ast.ImportSpec]int)
	qualified := make(map[*ast.Ident]bool)
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ImportSpec:
			return false
		case *ast.SelectorExpr:
			qualified[n.Sel] = true
		case *ast.Ident:
			obj := pass.TypesInfo.Uses[n]
			if pn, ok := obj.(*types.PkgName); ok {
				if spec := specs[pn]; spec != nil {
					counts[spec]++
				}
			} else if dot != nil && !qualified[n] && obj != nil && obj.Pkg() != nil &&
				obj.Pkg().Path() == "runtime" && obj.Pkg().Scope().Lookup(obj.Name()) != nil {
				counts[dot]++
			}
		}
		return true
	})
	return counts
}

// edits returns the import edits of the fix of a reference made through
// the runtime import spec.
func (p *importPlan) edits(spec *ast.ImportSpec) []analysis.TextEdit {
	del := spec
	if !p.sole[spec] {
		del = nil
	}
	if p.add == "" {
		if del == nil {
			return nil
		}
		return []analysis.TextEdit{p.deletion(del)}
	}
	target := p.lastImportDecl()
	if del == nil {
		return []analysis.TextEdit{p.insertion(target)}
	}
	if p.declOf(del) != target {
		return []analysis.TextEdit{p.deletion(del), p.insertion(target)}
	}
	// Deleting from the declaration that gains the import: keep the edits
	// apart, or make them one.
	if len(target.Specs) == 1 {
		return []analysis.TextEdit{{Pos: del.Pos(), End: del.End(), NewText: []byte(p.add)}}
	}
	anchor := anchorOf(target)
	if anchor != del {
		return []analysis.TextEdit{p.deletion(del), p.insertion(target)}
	}
	// del is the last spec of an all-standard block: put the new import
	// in a group of its own where del was.
	prev := target.Specs[len(target.Specs)-2]
	return []analysis.TextEdit{{Pos: p.eol(prev.End()), End: del.End(), NewText: []byte("\n\n\t" + p.add)}}
}

func (p *importPlan) lastImportDecl() *ast.GenDecl {
	var last *ast.GenDecl
	for _, d := range p.file.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT {
			last = g
		}
	}
	return last
}

func (p *importPlan) declOf(spec *ast.ImportSpec) *ast.GenDecl {
	for _, d := range p.file.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT {
			for _, s := range g.Specs {
				if s == spec {
					return g
				}
			}
		}
	}
	return nil
}

// anchorOf returns the spec of decl after which the new import goes: the
// last non-standard one, else the last one.
func anchorOf(decl *ast.GenDecl) *ast.ImportSpec {
	for i := len(decl.Specs) - 1; i >= 0; i-- {
		if s := decl.Specs[i].(*ast.ImportSpec); !isStd(importPath(s)) {
			return s
		}
	}
	return decl.Specs[len(decl.Specs)-1].(*ast.ImportSpec)
}

// isStd reports whether path looks like a standard library path: no dot
// in its first element.
func isStd(path string) bool {
	first, _, _ := strings.Cut(path, "/")
	return !strings.Contains(first, ".")
}

// insertion adds the new import to decl: after its anchor, in the
// anchor's group if that is not the standard library's, else in a group
// of its own; a declaration without parentheses gets them.
func (p *importPlan) insertion(decl *ast.GenDecl) analysis.TextEdit {
	if len(decl.Specs) == 0 {
		return analysis.TextEdit{Pos: decl.Rparen, End: decl.Rparen, NewText: []byte("\n\t" + p.add + "\n")}
	}
	anchor := anchorOf(decl)
	sep := "\n\n\t"
	if !isStd(importPath(anchor)) {
		sep = "\n\t"
	}
	if p.newDecl {
		return analysis.TextEdit{Pos: decl.End(), End: decl.End(), NewText: []byte("\nimport " + p.add)}
	}
	if !decl.Lparen.IsValid() {
		return analysis.TextEdit{Pos: anchor.Pos(), End: anchor.End(),
			NewText: []byte("(\n\t" + specText(anchor) + sep + p.add + "\n)")}
	}
	if p.line(anchor.End()) == p.line(decl.Rparen) {
		return analysis.TextEdit{Pos: decl.Rparen, End: decl.Rparen, NewText: []byte(sep + p.add + "\n")}
	}
	pos := p.eol(anchor.End())
	return analysis.TextEdit{Pos: pos, End: pos, NewText: []byte(sep + p.add)}
}

// deletion removes spec: its whole line when it has the line to itself,
// its whole declaration when it is the declaration's only spec.
func (p *importPlan) deletion(spec *ast.ImportSpec) analysis.TextEdit {
	decl := p.declOf(spec)
	if len(decl.Specs) == 1 {
		return p.lines(decl.Pos(), decl.End())
	}
	line := p.line(spec.Pos())
	alone := p.line(decl.Lparen) < line && p.line(decl.Rparen) > line
	for _, s := range decl.Specs {
		if s != spec && (p.line(s.Pos()) == line || p.line(s.End()) == line) {
			alone = false
		}
	}
	if alone {
		return p.lines(spec.Pos(), spec.End())
	}
	return analysis.TextEdit{Pos: spec.Pos(), End: spec.End()}
}

func specText(s *ast.ImportSpec) string {
	if s.Name != nil {
		return s.Name.Name + " " + s.Path.Value
	}
	return s.Path.Value
}

func (p *importPlan) line(pos token.Pos) int { return p.fset.File(pos).Line(pos) }

// eol returns the position of the newline that ends pos's line.
func (p *importPlan) eol(pos token.Pos) token.Pos {
	f := p.fset.File(pos)
	if l := f.Line(pos); l < f.LineCount() {
		return f.LineStart(l+1) - 1
	}
	return token.Pos(f.Base() + f.Size())
}

// lines returns the edit deleting the whole lines from pos's to end's.
func (p *importPlan) lines(pos, end token.Pos) analysis.TextEdit {
	f := p.fset.File(pos)
	start := f.LineStart(f.Line(pos))
	if l := f.Line(end); l < f.LineCount() {
		return analysis.TextEdit{Pos: start, End: f.LineStart(l + 1)}
	}
	return analysis.TextEdit{Pos: start, End: token.Pos(f.Base() + f.Size())}
}
