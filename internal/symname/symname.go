// Package symname reads and cuts the names the runtime gives functions
// (runtime.Frame.Function), for the packages that name sites: stackcapture
// and heapprofile.
package symname

import (
	"strings"
	"unicode/utf8"
)

// PkgPath returns the package path of a fully qualified function name as
// runtime.Func.Name and runtime.Frame.Function spell it:
// "net/http.(*Transport).dial" is in "net/http", "main.main.func1" in
// "main", "example.com/a.b/c.F" in "example.com/a.b/c". Type arguments
// ("pkg.F[go.shape.*example.com/x.T]") may hold slashes and dots of other
// packages, so they are cut off first.
func PkgPath(function string) string {
	if i := strings.IndexByte(function, '['); i >= 0 {
		function = function[:i]
	}
	slash := strings.LastIndexByte(function, '/')
	if i := strings.IndexByte(function[slash+1:], '.'); i >= 0 {
		return function[:slash+1+i]
	}
	return function
}

// CutUTF8 drops a rune cut in two at the end of s.
func CutUTF8(s string) string {
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// CutUTF8Front drops a rune cut in two at the start of s.
func CutUTF8Front(s string) string {
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[1:]
	}
	return s
}
