package stackcapture

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestLabel(t *testing.T) {
	long := strings.Repeat("verylongpackagename/", 30)
	tests := []struct {
		name string
		give Frame
		want string
	}{
		{"short", Frame{Function: "main.f", File: "/a/main.go", Line: 7}, "main.f /a/main.go:7"},
		{"generic", Frame{Function: "example.com/p.Map[...].Load", File: "/p/m.go", Line: 3}, "example.com/p.Map[...].Load /p/m.go:3"},
		{"invalid utf-8", Frame{Function: "main.f\xff", File: "/a/\xfe.go", Line: 1}, "main.f\uFFFD /a/\uFFFD.go:1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.give.Label(); got != tt.want {
				t.Fatalf("Label = %q, want %q", got, tt.want)
			}
		})
	}
	f := Frame{Function: long + "pkg.F.func1", File: "/" + long + "file.go", Line: 12345}
	got := f.Label()
	if len(got) > MaxLabelLen || !utf8.ValidString(got) || !strings.HasSuffix(got, "file.go:12345") || !strings.HasSuffix(strings.Fields(got)[0], "pkg.F.func1") {
		t.Fatalf("long frame: Label = %q (%d bytes)", got, len(got))
	}
}

// Whatever the names, a label is valid UTF-8, bounded, and ends with the
// line number.
func FuzzLabel(f *testing.F) {
	f.Add("main.main", "/src/main.go", 42)
	f.Add("example.com/p.G[...].func2.3", strings.Repeat("/very/long/path", 40)+"/x.go", 1)
	f.Add("_cgo_\xff\xfe", "\xc3", -1)
	f.Add(strings.Repeat("é", 300), strings.Repeat("日本", 200), 0)
	f.Fuzz(func(t *testing.T, fn, file string, line int) {
		got := Frame{Function: fn, File: file, Line: line}.Label()
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8: %q", got)
		}
		if len(got) > MaxLabelLen && (len(fn) > 0 || len(file) > 0) {
			t.Fatalf("%d bytes: %q", len(got), got)
		}
	})
}
