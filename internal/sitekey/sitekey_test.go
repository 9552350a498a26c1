package sitekey

import (
	"testing"

	"github.com/gcprobe/probe/finalizerwatch"
	"github.com/gcprobe/probe/stackcapture"
)

// TestOf: a site is its kind, function, file and line; its PC, its stack
// and its counts are not part of it.
func TestOf(t *testing.T) {
	site := func(k finalizerwatch.Kind, f stackcapture.Frame) *finalizerwatch.SiteStats {
		return &finalizerwatch.SiteStats{Kind: k, Site: f}
	}
	at := stackcapture.Frame{Function: "main.open", File: "/src/main.go", Line: 12, PC: 0x1000}
	inlined := at
	inlined.PC = 0x2000
	counted := site(finalizerwatch.KindFinalizer, inlined)
	counted.Registered, counted.PCs = 7, []uintptr{0x2000}
	if Of(site(finalizerwatch.KindFinalizer, at)) != Of(counted) {
		t.Error("one line at two PCs, or with other counts, is two sites")
	}
	if Of(site(finalizerwatch.KindFinalizer, at)) == Of(site(finalizerwatch.KindCleanup, at)) {
		t.Error("a finalizer and a cleanup at one line are one site")
	}
	for _, other := range []stackcapture.Frame{
		{Function: "main.close", File: at.File, Line: at.Line},
		{Function: at.Function, File: "/src/other.go", Line: at.Line},
		{Function: at.Function, File: at.File, Line: 13},
	} {
		if Of(site(finalizerwatch.KindFinalizer, at)) == Of(site(finalizerwatch.KindFinalizer, other)) {
			t.Errorf("%v and %v are one site", at, other)
		}
	}
	want := Key{finalizerwatch.KindCleanup, at.Function, at.File, at.Line}
	if got := Of(site(finalizerwatch.KindCleanup, at)); got != want {
		t.Errorf("Of = %+v, want %+v", got, want)
	}
}
