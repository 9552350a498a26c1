package bench

import (
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// markerLine returns the line of file (in this directory) that ends with
// the comment "// marker: name".
func markerLine(t testing.TB, file, name string) int {
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
