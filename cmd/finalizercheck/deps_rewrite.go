package main

import (
	"bytes"
	"cmp"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/checker"
	"golang.org/x/tools/go/packages"

	"github.com/gcprobe/probe/cmd/finalizercheck/analyzer"
)

// sourceFile is one file to rewrite: its package, path and the edits of
// the analyzer's suggested fixes, as byte offsets.
type sourceFile struct {
	pkg   *listPackage
	name  string // absolute path of the original
	edits []edit
	sites []int // lines of the rewritten registrations
}

type edit struct {
	start, end int
	text       string
}

// analyze type checks the candidate packages (deps alone, mains with
// their tests), runs the analyzer on them and returns the files that its
// fixes rewrite, sorted by name.
func (c *depsConfig) analyze(flags, deps, mains []string, byPath map[string]*listPackage, rep *depsReport) ([]*sourceFile, error) {
	files := make(map[string]*sourceFile)
	for _, set := range []struct {
		paths []string
		tests bool
	}{{deps, false}, {mains, true}} {
		if len(set.paths) == 0 {
			continue
		}
		cfg := &packages.Config{
			Mode: packages.NeedName | packages.NeedFiles | packages.NeedCompiledGoFiles |
				packages.NeedImports | packages.NeedTypes | packages.NeedTypesSizes |
				packages.NeedSyntax | packages.NeedTypesInfo | packages.NeedModule,
			BuildFlags: flags,
			Tests:      set.tests,
		}
		pkgs, err := packages.Load(cfg, set.paths...)
		if err != nil {
			return nil, fmt.Errorf("loading packages: %v", err)
		}
		var bad []string
		packages.Visit(pkgs, nil, func(p *packages.Package) {
			for _, e := range p.Errors {
				bad = append(bad, e.Error())
			}
		})
		if len(bad) > 0 {
			return nil, fmt.Errorf("type checking: %s", strings.Join(bad, "; "))
		}
		graph, err := checker.Analyze([]*analysis.Analyzer{analyzer.Analyzer}, pkgs, nil)
		if err != nil {
			return nil, err
		}
		for act := range graph.All() {
			if act.Analyzer != analyzer.Analyzer {
				continue
			}
			if act.Err != nil {
				return nil, fmt.Errorf("%s: %v", act.Package.PkgPath, act.Err)
			}
			// An external test package, p_test, has its files in p's directory.
			lp := byPath[strings.TrimSuffix(act.Package.PkgPath, "_test")]
			if lp == nil {
				continue
			}
			for _, d := range act.Diagnostics {
				collect(act.Package.Fset, lp, d, files, rep)
			}
		}
	}
	out := make([]*sourceFile, 0, len(files))
	for _, f := range files {
		out = append(out, f)
	}
	slices.SortFunc(out, func(a, b *sourceFile) int { return cmp.Compare(a.name, b.name) })
	for _, f := range out {
		for _, l := range f.sites {
			rep.rewritten = append(rep.rewritten, fmt.Sprintf("%s:%d", f.name, l))
		}
	}
	slices.Sort(rep.unfixed)
	rep.unfixed = slices.Compact(rep.unfixed)
	return out, nil
}

// collect adds the edits of diagnostic d, reported in package lp, to the
// file they change, or says why the registration stays unwatched.
func collect(fset *token.FileSet, lp *listPackage, d analysis.Diagnostic, files map[string]*sourceFile, rep *depsReport) {
	pos := fset.Position(d.Pos)
	tf := fset.File(d.Pos)
	name := tf.Name()
	if filepath.Dir(name) != lp.Dir || slices.Contains(lp.CgoFiles, filepath.Base(name)) {
		rep.unfixed = append(rep.unfixed, fmt.Sprintf("%s: in a cgo file, which is not rewritten", pos))
		return
	}
	if len(d.SuggestedFixes) == 0 {
		rep.unfixed = append(rep.unfixed, fmt.Sprintf("%s: %s", pos, d.Message))
		return
	}
	f := files[name]
	if f == nil {
		f = &sourceFile{pkg: lp, name: name}
		files[name] = f
	}
	line := tf.Line(d.Pos)
	if slices.Contains(f.sites, line) && f.hasEditAt(tf.Offset(d.Pos)) {
		return // the same file, seen again in a test variant of its package
	}
	f.sites = append(f.sites, line)
	for _, e := range d.SuggestedFixes[0].TextEdits {
		end := e.End
		if !end.IsValid() {
			end = e.Pos
		}
		f.edits = append(f.edits, edit{tf.Offset(e.Pos), tf.Offset(end), string(e.NewText)})
	}
}

func (f *sourceFile) hasEditAt(off int) bool {
	return slices.ContainsFunc(f.edits, func(e edit) bool { return e.start == off })
}

// rewrite returns src with edits applied, keeping every line of the
// original at its file and line: a //line directive naming the original
// file opens the result (so that the copy reports the original's path),
// and another follows each edit that adds or removes lines. An import of
// runtime that the edits leave unused becomes a blank import, on its
// line.
func rewrite(src []byte, orig string, edits []edit) ([]byte, error) {
	slices.SortFunc(edits, func(a, b edit) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(a.end, b.end), strings.Compare(a.text, b.text))
	})
	edits = slices.Compact(edits) // the fixes of one file share their import edit
	for i := 1; i < len(edits); i++ {
		if edits[i].start < edits[i-1].end || edits[i].start == edits[i-1].start {
			return nil, fmt.Errorf("%s: the fixes overlap", orig)
		}
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, orig, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	tf := fset.File(file.Pos())
	// lineAfter returns the offset of the first line start at or after
	// off that is not inside a comment, or -1 at the end of the file.
	lineAfter := func(off int) int {
		for {
			if off > 0 && off < len(src) && src[off-1] != '\n' {
				i := bytes.IndexByte(src[off:], '\n')
				if i < 0 {
					return -1
				}
				off += i + 1
			}
			if off >= len(src) {
				return -1
			}
			moved := false
			for _, g := range file.Comments {
				s, e := tf.Offset(g.Pos()), tf.Offset(g.End())
				if s < off && off < e {
					off, moved = e, true
				}
			}
			if !moved {
				return off
			}
		}
	}
	directive := func(line int) string { return "//line " + orig + ":" + strconv.Itoa(line) + "\n" }

	var out bytes.Buffer
	out.WriteString(directive(1))
	at := 0
	if bytes.HasPrefix(src, byteOrderMark) {
		// The compiler takes a byte-order mark only as a file's first
		// bytes, and the directive must come first: drop the mark, which
		// means nothing to Go (the edits' offsets count it, so skip it
		// rather than cut it off).
		at = len(byteOrderMark)
	}
	for i := 0; i < len(edits); {
		// A cluster: this edit and those that start before the line after
		// it ends.
		delta := 0
		j := i
		next := -1
		for ; j < len(edits); j++ {
			if j > i && (next < 0 || edits[j].start >= next) {
				break
			}
			e := edits[j]
			out.Write(src[at:e.start])
			out.WriteString(e.text)
			at = e.end
			delta += strings.Count(e.text, "\n") - bytes.Count(src[e.start:e.end], []byte("\n"))
			next = lineAfter(e.end)
		}
		i = j
		if delta != 0 && next >= 0 {
			out.Write(src[at:next])
			at = next
			out.WriteString(directive(tf.Line(tf.Pos(next))))
		}
	}
	out.Write(src[at:])
	return blankUnusedRuntime(out.Bytes(), orig)
}

// byteOrderMark is UTF-8's, which the Go compiler accepts at the start of
// a file.
var byteOrderMark = []byte("\ufeff")

// blankUnusedRuntime turns an import of runtime that src no longer uses
// into import _ "runtime", which keeps its line and compiles.
func blankUnusedRuntime(src []byte, name string) ([]byte, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, fmt.Errorf("the rewritten %s does not parse: %v", name, err)
	}
	for _, spec := range file.Imports {
		if p, _ := strconv.Unquote(spec.Path.Value); p != "runtime" {
			continue
		}
		local := "runtime"
		if spec.Name != nil {
			local = spec.Name.Name
		}
		if local == "_" || local == "." {
			continue
		}
		used := false
		ast.Inspect(file, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if id, ok := sel.X.(*ast.Ident); ok && id.Name == local {
					used = true
				}
			}
			return !used
		})
		if used {
			continue
		}
		tf := fset.File(spec.Pos())
		start := tf.Offset(spec.Pos())
		end := tf.Offset(spec.Path.Pos())
		return slices.Concat(src[:start], []byte("_ "), src[end:]), nil
	}
	return src, nil
}

// rewriteFile reads f and returns its rewritten text.
func (f *sourceFile) rewrite() ([]byte, error) {
	src, err := os.ReadFile(f.name)
	if err != nil {
		return nil, err
	}
	return rewrite(src, f.name, f.edits)
}
