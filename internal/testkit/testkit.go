// Package testkit holds helpers that gcprobe's tests share. Nothing outside
// this module's tests imports it.
package testkit

import (
	"os"
	"strings"
	"testing"
)

// MarkerLine returns the line of file (relative to the test's package
// folder) that ends with the comment "// marker: name": where a test
// plants a registration whose reported line it then checks. It fails the
// test if there is no such line.
func MarkerLine(t testing.TB, file, name string) int {
	t.Helper()
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(src), "\n") {
		if strings.HasSuffix(l, "// marker: "+name) {
			return i + 1
		}
	}
	t.Fatalf("no marker %q in %s", name, file)
	return 0
}
