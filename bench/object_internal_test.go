package bench

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
)

func TestFixtures(t *testing.T) {
	a, b := fixtures(), fixtures()
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			t.Fatalf("fixture %d differs between two generations", i)
		}
		if n := len(a[i]); n < 11<<10 || n > 13<<10 {
			t.Errorf("fixture %d is %d bytes, want about 12 KB", i, n)
		}
		var o Object
		if err := json.Unmarshal(a[i], &o); err != nil {
			t.Fatal(err)
		}
		if len(o.Metadata.Labels) != fixtureLabels || len(o.Metadata.Annotations) != fixtureAnnotations {
			t.Errorf("fixture %d: %d labels and %d annotations, want %d and %d", i,
				len(o.Metadata.Labels), len(o.Metadata.Annotations), fixtureLabels, fixtureAnnotations)
		}
		if !reflect.DeepEqual(&o, newFixture(i)) {
			t.Errorf("fixture %d does not round-trip through JSON", i)
		}
	}
}

func TestDeepCopy(t *testing.T) {
	orig := newFixture(3)
	want := newFixture(3)
	cp := orig.DeepCopy()
	if !reflect.DeepEqual(cp, orig) {
		t.Fatal("DeepCopy differs from the original")
	}
	// Change every map and slice of the copy: the original must not see it.
	cp.Metadata.Labels["x"] = "y"
	cp.Metadata.Annotations["x"] = "y"
	*cp.Metadata.OwnerReferences[0].Controller = false
	cp.Metadata.OwnerReferences[0].Name = "changed"
	cp.Metadata.Finalizers[0] = "changed"
	cp.Metadata.ManagedFields[0].Fields[0] = "changed"
	cp.Spec.Selector["x"] = "y"
	cp.Spec.Template.Labels["x"] = "y"
	c := &cp.Spec.Template.Containers[0]
	c.Args[0], c.Env[0].Value, c.Ports[0].Name = "changed", "changed", "changed"
	c.Resources.Limits["cpu"], c.Resources.Requests["cpu"] = "9", "9"
	cp.Spec.Volumes[0].Items["x"] = "y"
	cp.Status.Conditions[0].Message = "changed"
	if !reflect.DeepEqual(orig, want) {
		t.Error("changing the copy changed the original: DeepCopy shares memory")
	}
}
