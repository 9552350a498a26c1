package finalizerwatch

import (
	"reflect"
	"strings"
	"testing"
)

// hasUncommon reads the flag the runtime's finalizer check tests: set for
// a named type or one with methods (unexported ones too), clear otherwise.
func TestHasUncommon(t *testing.T) {
	type onlyUnexported struct{ n int }
	for _, tt := range []struct {
		name string
		give reflect.Type
		want bool
	}{
		{"unnamed pointer, no methods", reflect.TypeFor[*struct{ n int }](), false},
		{"pointer to a named type without methods", reflect.TypeFor[*big](), false},
		{"pointer to a type with an unexported method", reflect.TypeFor[*withMethod](), true},
		{"named pointer type", reflect.TypeFor[namedPtr](), true},
		{"named struct", reflect.TypeFor[big](), true},
		{"pointer to a type with exported methods", reflect.TypeFor[*strings.Builder](), true},
		{"func type", reflect.TypeFor[func(*big)](), false},
		{"local named type", reflect.TypeFor[onlyUnexported](), true},
	} {
		if got := hasUncommon(tt.give); got != tt.want {
			t.Errorf("%s (%v): hasUncommon = %v, want %v", tt.name, tt.give, got, tt.want)
		}
	}
	_ = (*withMethod).method
}
