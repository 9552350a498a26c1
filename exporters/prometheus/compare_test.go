package promexporter

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// collectAndCompare does what client_golang's testutil.CollectAndCompare
// does: it gathers c through a pedantic registry and compares the families
// named (all if none) with the text exposition expected. testutil itself
// cannot be imported here yet: it needs github.com/kylelemons/godebug,
// which the module's go.sum does not list.
func collectAndCompare(c prometheus.Collector, expected io.Reader, names ...string) error {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		return fmt.Errorf("registering collector: %w", err)
	}
	got, err := reg.Gather()
	if err != nil {
		return fmt.Errorf("gathering: %w", err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	wantByName, err := parser.TextToMetricFamilies(expected)
	if err != nil {
		return fmt.Errorf("parsing expected metrics: %w", err)
	}
	want := make([]*dto.MetricFamily, 0, len(wantByName))
	for _, f := range wantByName {
		want = append(want, f)
	}
	keep := func(f *dto.MetricFamily) bool { return len(names) == 0 || slices.Contains(names, f.GetName()) }
	g, w := exposition(got, keep), exposition(want, keep)
	if g != w {
		return fmt.Errorf("exposition differs at %s\n--- want\n%s--- got\n%s", firstDiff(w, g), w, g)
	}
	return nil
}

// countSeries returns how many series of family name c collects.
func countSeries(c prometheus.Collector, name string) (int, error) {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		return 0, err
	}
	fams, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, f := range fams {
		if f.GetName() == name {
			return len(f.GetMetric()), nil
		}
	}
	return 0, nil
}

// exposition renders the kept families in text format, families by name
// and series by labels.
func exposition(fams []*dto.MetricFamily, keep func(*dto.MetricFamily) bool) string {
	fams = slices.DeleteFunc(slices.Clone(fams), func(f *dto.MetricFamily) bool { return !keep(f) })
	slices.SortFunc(fams, func(a, b *dto.MetricFamily) int { return cmp.Compare(a.GetName(), b.GetName()) })
	var b strings.Builder
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			slices.SortFunc(m.Label, func(x, y *dto.LabelPair) int { return cmp.Compare(x.GetName(), y.GetName()) })
		}
		slices.SortFunc(f.Metric, func(x, y *dto.Metric) int { return cmp.Compare(labelString(x), labelString(y)) })
		if _, err := expfmt.MetricFamilyToText(&b, f); err != nil {
			fmt.Fprintf(&b, "error: %v\n", err)
		}
	}
	return b.String()
}

func labelString(m *dto.Metric) string {
	var b strings.Builder
	for _, l := range m.GetLabel() {
		fmt.Fprintf(&b, "%s=%q,", l.GetName(), l.GetValue())
	}
	return b.String()
}

// firstDiff names the first line where want and got differ.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n  want: %s\n  got:  %s", i+1, wl, gl)
		}
	}
	return "no line"
}
