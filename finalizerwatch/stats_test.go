package finalizerwatch

import (
	"reflect"
	"regexp"
	"testing"
)

// Counters describes every field of Counts once, in the fields' order,
// and Add adds every field: a counter added to Counts without its row of
// Counters (and so without its series, sample type and column) fails here.
func TestCountersDescribeEveryCount(t *testing.T) {
	typ := reflect.TypeFor[Counts]()
	cs := Counters()
	if len(cs) != typ.NumField() {
		t.Fatalf("Counters has %d rows, Counts %d fields", len(cs), typ.NumField())
	}
	// Field i holds i+1: each counter must read its own field.
	var c Counts
	v := reflect.ValueOf(&c).Elem()
	for i := range typ.NumField() {
		if typ.Field(i).Type.Kind() != reflect.Uint64 {
			t.Fatalf("Counts.%s is a %s: every count is a uint64", typ.Field(i).Name, typ.Field(i).Type)
		}
		v.Field(i).SetUint(uint64(i + 1))
	}
	name := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	seen := map[string]bool{}
	for i, k := range cs {
		if k.Value == nil {
			t.Fatalf("Counters()[%d] is not described (NumCounters is %d)", i, NumCounters)
		}
		if got := k.Value(&c); got != uint64(i+1) {
			t.Errorf("Counters()[%d] (%s) reads field %d, want %s", i, k.Name, got-1, typ.Field(i).Name)
		}
		if !name.MatchString(k.Name) || seen[k.Name] {
			t.Errorf("Counters()[%d]: name %q is not snake case or not unique", i, k.Name)
		}
		seen[k.Name] = true
		if k.Help == "" {
			t.Errorf("Counters()[%d] (%s) has no help", i, k.Name)
		}
	}
	sum := c
	sum.Add(c)
	for i, k := range cs {
		if got := k.Value(&sum); got != 2*uint64(i+1) {
			t.Errorf("Add: %s is %d, want %d", k.Name, got, 2*(i+1))
		}
	}
}

// SummaryCounters are the Summary rows of Counters, in its order.
func TestSummaryCounters(t *testing.T) {
	var want []string
	for _, c := range Counters() {
		if c.Summary {
			want = append(want, c.Name)
		}
	}
	var got []string
	for _, c := range SummaryCounters() {
		got = append(got, c.Name)
	}
	if !reflect.DeepEqual(got, want) || len(got) == 0 {
		t.Errorf("SummaryCounters are %q, want the Summary counters %q", got, want)
	}
}

// A rare counter costs an entry nothing until its first event (no rare
// table), and what site.addRare counts in its slot is what the entry's
// Counts read in its field, for every rare counter, with no other
// counter touched.
func TestRareCountersReadBack(t *testing.T) {
	if len(rareCounters) == 0 {
		t.Skip("no rare counter")
	}
	var s site
	s.ages.mu.Lock()
	if c := s.countsLocked(0); c != (Counts{}) || s.rare.Load() != nil {
		t.Fatalf("a new entry reads %+v, rare table %p", c, s.rare.Load())
	}
	s.ages.mu.Unlock()
	want := map[string]uint64{}
	for slot, i := range rareCounters {
		name := counters[i].Name
		if got := rareSlot(name); got != slot {
			t.Errorf("rareSlot(%q) = %d, want %d", name, got, slot)
		}
		s.addRare(slot, uint64(100+slot))
		want[name] = uint64(100 + slot)
	}
	s.ages.mu.Lock()
	c := s.countsLocked(0)
	s.ages.mu.Unlock()
	for _, k := range Counters() {
		if got := k.Value(&c); got != want[k.Name] {
			t.Errorf("%s reads %d, want %d", k.Name, got, want[k.Name])
		}
	}
}
