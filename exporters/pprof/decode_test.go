package pprofexporter

import (
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"testing"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/stackcapture"
	"github.com/google/pprof/profile"
)

// TestDecodeMatchesParse: decodeProfile returns, for what the builder
// encodes, the profile that profile.ParseUncompressed returns, every
// exported field alike (nil and empty lists told apart).
func TestDecodeMatchesParse(t *testing.T) {
	overflowed := func(t *testing.T) *builder {
		w, err := finalizerwatch.New(finalizerwatch.WithMaxSites(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Close)
		t.Cleanup(func() { kept = nil })
		plantLeak(w, 2)
		churn(w, 3)
		return ledgerBuilder(w)
	}
	tests := []struct {
		name string
		give func(t *testing.T) *builder
	}{
		{"ledger", func(t *testing.T) *builder { return ledgerBuilder(plantedWatcher(t)) }},
		{"overflow entry", overflowed},
		{"empty ledger", func(t *testing.T) *builder {
			w, err := finalizerwatch.New()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Close)
			return ledgerBuilder(w)
		}},
		{"sampled stacks", func(t *testing.T) *builder {
			w, err := finalizerwatch.New(finalizerwatch.WithStackSampleRate(1))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(w.Close)
			keep := []*sampledObj{{}, {}, {}}
			sampledPathA(w, keep[0])
			sampledPathB(w, keep[1])
			sampledPathB(w, keep[2])
			t.Cleanup(func() { runtime.KeepAlive(keep) })
			return sampledBuilder(w)
		}},
		{"frames without PCs", func(*testing.T) *builder {
			b := newBuilder(sampledTypes, SampleOutstanding)
			f := func(fn string, line int) stackcapture.Frame {
				return stackcapture.Frame{Function: fn, File: "/src/app/a.go", Line: line}
			}
			b.addFrames(finalizerwatch.KindFinalizer, []stackcapture.Frame{f("app.a", 1), f("app.main", 9)}, []int64{1, 2})
			b.addFrames(finalizerwatch.KindCleanup, []stackcapture.Frame{f("", 0)}, []int64{0, -1})
			b.addFrames(finalizerwatch.KindCleanup, nil, []int64{0, 0}) // no locations
			b.comments = []string{"a comment", ""}
			return b
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := tt.give(t)
			defer b.release()
			data := b.encode()
			want, err := profile.ParseUncompressed(data)
			if err != nil {
				t.Fatal(err)
			}
			got, err := decodeProfile(data)
			if err != nil {
				t.Fatal(err)
			}
			if err := sameExported(reflect.ValueOf(got), reflect.ValueOf(want), "profile"); err != nil {
				t.Error(err)
			}
			if err := got.CheckValid(); err != nil {
				t.Error(err)
			}
		})
	}
}

// sameExported returns an error naming the first exported field (path) in
// which got and want differ; unexported fields (the profile package's
// encoding state) are not compared.
func sameExported(got, want reflect.Value, path string) error {
	if got.Kind() != want.Kind() {
		return fmt.Errorf("%s: kind %v, want %v", path, got.Kind(), want.Kind())
	}
	switch got.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Map:
		if got.IsNil() != want.IsNil() {
			return fmt.Errorf("%s: nil %t, want %t", path, got.IsNil(), want.IsNil())
		}
	}
	switch got.Kind() {
	case reflect.Pointer:
		if got.IsNil() {
			return nil
		}
		return sameExported(got.Elem(), want.Elem(), path)
	case reflect.Struct:
		for i := range got.NumField() {
			if f := got.Type().Field(i); f.IsExported() {
				if err := sameExported(got.Field(i), want.Field(i), path+"."+f.Name); err != nil {
					return err
				}
			}
		}
		return nil
	case reflect.Slice:
		if got.Len() != want.Len() {
			return fmt.Errorf("%s: length %d, want %d", path, got.Len(), want.Len())
		}
		for i := range got.Len() {
			if err := sameExported(got.Index(i), want.Index(i), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Map:
		if got.Len() != want.Len() {
			return fmt.Errorf("%s: %d keys, want %d", path, got.Len(), want.Len())
		}
		for _, k := range want.MapKeys() {
			g := got.MapIndex(k)
			if !g.IsValid() {
				return fmt.Errorf("%s: no key %v", path, k)
			}
			if err := sameExported(g, want.MapIndex(k), fmt.Sprintf("%s[%v]", path, k)); err != nil {
				return err
			}
		}
		return nil
	default:
		if !reflect.DeepEqual(got.Interface(), want.Interface()) {
			return fmt.Errorf("%s: %v, want %v", path, got, want)
		}
		return nil
	}
}

// TestDecodeRefuses: what the builder never writes is an error, not a
// panic or a profile missing a field.
func TestDecodeRefuses(t *testing.T) {
	b := newBuilder(ledgerTypes, SampleGrowth)
	b.addFrames(finalizerwatch.KindFinalizer, []stackcapture.Frame{{Function: "app.a", File: "a.go", Line: 1, PC: 0x1000}}, []int64{1, 2, 3, 4})
	good := append([]byte(nil), b.encode()...)
	b.release()
	tests := []struct {
		name string
		give []byte
	}{
		{"truncated", good[:len(good)-1]},
		{"a mapping", appendBytes(append([]byte(nil), good...), 3, appendUint(nil, 1, 1))},
		{"a sample type's unit out of the string table", appendBytes(append([]byte(nil), good...), fProfileSampleType,
			appendInt(nil, fValueTypeUnit, 1000))},
		{"a location numbered out of order", appendBytes(append([]byte(nil), good...), fProfileLocation,
			appendUint(nil, fLocationID, 7))},
		{"a sample at a location that is not there", appendBytes(append([]byte(nil), good...), fProfileSample,
			appendPacked(nil, fSampleLocationID, []uint64{9}))},
		{"a line of a function that is not there", appendBytes(append([]byte(nil), good...), fProfileLocation,
			appendBytes(appendUint(nil, fLocationID, 2), fLocationLine, appendUint(nil, fLineFunctionID, 5)))},
		{"unpacked location IDs", appendBytes(append([]byte(nil), good...), fProfileSample,
			appendUint(nil, fSampleLocationID, 1))},
		{"a numeric label", appendBytes(append([]byte(nil), good...), fProfileSample,
			appendBytes(nil, fSampleLabel, appendUint(appendUint(nil, fLabelKey, 1), 3, 5)))},
	}
	if _, err := decodeProfile(good); err != nil {
		t.Fatalf("the builder's own encoding: %v", err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if p, err := decodeProfile(tt.give); !errors.Is(err, errEncoding) {
				t.Errorf("decoded to %v, %v; want an error", p, err)
			}
		})
	}
}

// FuzzDecodeProfile: decodeProfile never panics, and what it decodes the
// profile package reads alike.
func FuzzDecodeProfile(f *testing.F) {
	b := newBuilder(ledgerTypes, SampleGrowth)
	b.addFrames(finalizerwatch.KindFinalizer, []stackcapture.Frame{{Function: "app.a", File: "a.go", Line: 1, PC: 0x1000},
		{Function: "app.main", File: "a.go", Line: 9, PC: 0x2000}}, []int64{1, 2, 3, 4})
	b.addFrames(finalizerwatch.KindCleanup, []stackcapture.Frame{{Function: "app.main", File: "a.go", Line: 9, PC: 0x2000}}, []int64{5, 0, 0, 1})
	f.Add(append([]byte(nil), b.encode()...))
	b.release()
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := decodeProfile(data)
		if err != nil {
			return
		}
		want, err := profile.ParseUncompressed(data)
		if err != nil {
			t.Fatalf("decoded, but ParseUncompressed: %v", err)
		}
		if err := sameExported(reflect.ValueOf(got), reflect.ValueOf(want), "profile"); err != nil {
			t.Error(err)
		}
	})
}

// TestProfileSharesLabelMaps: the samples of one kind share a Label map
// (as Profile says), those of another kind have another, and a second
// profile shares none of the first's.
func TestProfileSharesLabelMaps(t *testing.T) {
	b := newBuilder(sampledTypes, SampleOutstanding)
	defer b.release()
	f := stackcapture.Frame{Function: "app.a", File: "a.go", Line: 1}
	b.addFrames(finalizerwatch.KindFinalizer, []stackcapture.Frame{f}, []int64{1, 1})
	b.addFrames(finalizerwatch.KindFinalizer, []stackcapture.Frame{f}, []int64{2, 2})
	b.addFrames(finalizerwatch.KindCleanup, []stackcapture.Frame{f}, []int64{3, 3})
	p, q := b.decode(), b.decode()
	same := func(a, b map[string][]string) bool {
		return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
	}
	if s := p.Sample; !same(s[0].Label, s[1].Label) || same(s[0].Label, s[2].Label) {
		t.Errorf("label maps of finalizer, finalizer, cleanup: %p %p %p; want the first two alike", s[0].Label, s[1].Label, s[2].Label)
	}
	if same(p.Sample[0].Label, q.Sample[0].Label) {
		t.Error("two profiles share a label map")
	}
	if got := p.Sample[2].Label[LabelKind]; len(got) != 1 || got[0] != "cleanup" {
		t.Errorf("cleanup sample's kind %q", got)
	}
}

// TestProfileAllocations: Profile allocates a few slices per profile and
// a label map per kind, not objects per sample (ParseUncompressed made
// some seven per sample: 7 100 here), so its allocations do not grow
// with the ledger.
func TestProfileAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops pooled builders and snapshots")
	}
	for _, n := range []int{100, 1000} {
		w := ledgerOf(t, n)
		Profile(w) // the pools' first builder and snapshot
		if got := testing.AllocsPerRun(5, func() { Profile(w) }); got > 40 {
			t.Errorf("Profile of %d sites: %.0f allocations, want at most 40", n, got)
		}
	}
}
