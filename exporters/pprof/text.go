package pprofexporter

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/google/pprof/profile"
)

// maxTextSamples bounds the samples WriteText writes; the rest are counted
// in a last line. The ledger is bounded already; this keeps the text form a
// page a person reads.
const maxTextSamples = 1000

// WriteText writes prof as plain text for a person, the form the Handler
// serves with ?debug=1 (as net/http/pprof's profiles answer text to
// ?debug=1): a header naming the sample types, then one block per sample,
// in decreasing order of the default sample type, with its values, its
// labels and its stack, innermost frame first, as "function file:line".
// It returns the first error writing to w.
func WriteText(w io.Writer, prof *profile.Profile) error {
	bw := bufio.NewWriter(w)
	types := make([]string, len(prof.SampleType))
	def := 0
	for i, st := range prof.SampleType {
		types[i] = st.Type + "/" + st.Unit
		if st.Type == prof.DefaultSampleType {
			def = i
		}
	}
	fmt.Fprintf(bw, "gcprobe finalizers and cleanups: %d samples\n", len(prof.Sample))
	fmt.Fprintf(bw, "values: %s (sorted by %s)\n", strings.Join(types, " "), prof.SampleType[def].Type)
	for _, c := range prof.Comments {
		fmt.Fprintf(bw, "# %s\n", c)
	}
	samples := slices.Clone(prof.Sample)
	slices.SortStableFunc(samples, func(a, b *profile.Sample) int {
		return cmp.Compare(value(b, def), value(a, def))
	})
	for i, s := range samples {
		if i == maxTextSamples {
			fmt.Fprintf(bw, "\n... %d more samples (download the profile for all of them)\n", len(samples)-i)
			break
		}
		bw.WriteString("\n")
		for j, v := range s.Value {
			if j > 0 {
				bw.WriteByte(' ')
			}
			fmt.Fprintf(bw, "%d", v)
		}
		keys := make([]string, 0, len(s.Label))
		for k := range s.Label {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			fmt.Fprintf(bw, " %s=%s", k, strings.Join(s.Label[k], ","))
		}
		bw.WriteByte('\n')
		for _, loc := range s.Location {
			for _, ln := range loc.Line {
				name, file := "?", "?"
				if ln.Function != nil {
					name, file = ln.Function.Name, ln.Function.Filename
				}
				fmt.Fprintf(bw, "\t%#x\t%s %s:%d\n", loc.Address, name, file, ln.Line)
			}
		}
	}
	return bw.Flush()
}

func value(s *profile.Sample, i int) int64 {
	if i < len(s.Value) {
		return s.Value[i]
	}
	return 0
}
