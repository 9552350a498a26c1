package main

import (
	"go/parser"
	"go/token"
	"strconv"
	"strings"
	"testing"
)

// TestRewriteKeepsLines applies edits shaped like the analyzer's import
// fixes and checks, through go/token's handling of //line directives,
// that every marked line of the result still reports the original file
// and line.
func TestRewriteKeepsLines(t *testing.T) {
	const orig = "/mod/cache/example.com/m@v1.0.0/m.go"
	type change struct{ old, new string } // replace the first old by new
	for _, tt := range []struct {
		name    string
		give    string
		changes []change
		want    []string // substrings of the result
		wantErr string
	}{
		{
			name: "import added in a group of its own",
			give: "package m\n\nimport (\n\t\"runtime\"\n\t\"sync\"\n)\n\nvar mu sync.Mutex // marker: a\n\nfunc f(p *int) {\n\truntime.SetFinalizer(p, nil) // marker: b\n\t_ = runtime.NumCPU()\n}\n",
			changes: []change{
				{"\t\"sync\"\n", "\t\"sync\"\n\n\t\"github.com/gcprobe/probe/finalizerwatch\"\n"},
				{"runtime.SetFinalizer", "finalizerwatch.SetFinalizer"},
			},
			want: []string{"\t\"runtime\"\n", "finalizerwatch.SetFinalizer(p"},
		},
		{
			name: "runtime import deleted, one line fewer",
			give: "package m\n\nimport (\n\t\"fmt\"\n\t\"runtime\"\n)\n\nfunc f(p *int) {\n\tfmt.Println()\n\truntime.SetFinalizer(p, nil) // marker: a\n}\n",
			changes: []change{
				{"\t\"runtime\"\n", ""},
				{")\n\nfunc", "\n\t\"github.com/gcprobe/probe/finalizerwatch\"\n)\n\nfunc"},
				{"runtime.SetFinalizer", "finalizerwatch.SetFinalizer"},
			},
			want: []string{"finalizerwatch.SetFinalizer(p"},
		},
		{
			name: "sole import replaced in place",
			give: "package m\n\nimport \"runtime\"\n\nfunc f(p *int) {\n\truntime.SetFinalizer(p, nil) // marker: a\n}\n",
			changes: []change{
				{"\"runtime\"", "\"github.com/gcprobe/probe/finalizerwatch\""},
				{"runtime.SetFinalizer", "finalizerwatch.SetFinalizer"},
			},
			want: []string{"//line " + orig + ":1\n", "import \"github.com/gcprobe/probe/finalizerwatch\"\n"},
		},
		{
			name: "a block comment after the imports",
			give: "package m\n\nimport (\"runtime\") /* a comment\nover lines */\n\nfunc f(p *int) {\n\truntime.SetFinalizer(p, nil) // marker: a\n\t_ = runtime.NumCPU()\n}\n",
			changes: []change{
				{")", "\n\t\"github.com/gcprobe/probe/finalizerwatch\"\n)"},
				{"runtime.SetFinalizer", "finalizerwatch.SetFinalizer"},
			},
			want: []string{"over lines */\n//line " + orig + ":5\n"},
		},
		{
			name: "runtime import left unused becomes blank",
			give: "package m\n\nimport (\n\t\"runtime\"\n)\n\nfunc f(p, q *int) {\n\truntime.SetFinalizer(p, nil) // marker: a\n\truntime.SetFinalizer(q, nil) // marker: b\n}\n",
			changes: []change{
				{"\t\"runtime\"\n", "\t\"runtime\"\n\n\t\"github.com/gcprobe/probe/finalizerwatch\"\n"},
				{"runtime.SetFinalizer(p", "finalizerwatch.SetFinalizer(p"},
				{"runtime.SetFinalizer(q", "finalizerwatch.SetFinalizer(q"},
			},
			want: []string{"\t_ \"runtime\"\n"},
		},
		{
			// Issue 26, item 7: the directive was written before the
			// mark, which the compiler takes only as a file's first
			// bytes ("illegal byte order mark").
			name: "a file that starts with a byte-order mark",
			give: "\ufeffpackage m\n\nimport \"runtime\"\n\nfunc f(p *int) {\n\truntime.SetFinalizer(p, nil) // marker: a\n}\n",
			changes: []change{
				{"\"runtime\"", "\"github.com/gcprobe/probe/finalizerwatch\""},
				{"runtime.SetFinalizer", "finalizerwatch.SetFinalizer"},
			},
			want: []string{"//line " + orig + ":1\npackage m\n"},
		},
		{
			name:    "overlapping edits",
			give:    "package m\n\nimport \"runtime\"\n\nvar _ = runtime.SetFinalizer\n",
			changes: []change{{"runtime.SetFinalizer", "x"}, {"time.Set", "y"}},
			wantErr: "overlap",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var edits []edit
			for _, c := range tt.changes {
				i := strings.Index(tt.give, c.old)
				if i < 0 {
					t.Fatalf("%q not in the source", c.old)
				}
				edits = append(edits, edit{i, i + len(c.old), c.new})
			}
			// The analyzer repeats a file's import edit in every fix.
			edits = append(edits, edits[0])
			got, err := rewrite([]byte(tt.give), orig, edits)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tt.want {
				if !strings.Contains(string(got), w) {
					t.Errorf("result lacks %q:\n%s", w, got)
				}
			}
			wantLines := markers(t, token.NewFileSet(), "orig.go", []byte(tt.give))
			fset := token.NewFileSet()
			gotLines := markers(t, fset, "copy.go", got)
			if len(gotLines) != len(wantLines) || len(wantLines) == 0 {
				t.Fatalf("markers: %v in the result, %v in the source", gotLines, wantLines)
			}
			for m, pos := range gotLines {
				if want := orig + ":" + strconv.Itoa(wantLines[m].Line); pos.Filename+":"+strconv.Itoa(pos.Line) != want {
					t.Errorf("marker %s at %s:%d, want %s; result:\n%s", m, pos.Filename, pos.Line, want, got)
				}
			}
		})
	}
}

// markers returns the position, //line directives applied, of each
// "// marker: x" comment of src.
func markers(t *testing.T, fset *token.FileSet, name string, src []byte) map[string]token.Position {
	t.Helper()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
	if err != nil {
		t.Fatalf("%v:\n%s", err, src)
	}
	m := make(map[string]token.Position)
	for _, g := range f.Comments {
		for _, c := range g.List {
			if x, ok := strings.CutPrefix(c.Text, "// marker: "); ok {
				m[x] = fset.PositionFor(c.Pos(), true)
			}
		}
	}
	return m
}
