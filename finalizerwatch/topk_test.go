package finalizerwatch

import "testing"

// CheckTopK is the limit of every option that sets a reader's top K: at
// least 1, with one message naming the option and the problem.
func TestCheckTopK(t *testing.T) {
	for _, k := range []int{1, 2, DefaultTopK, 1000, 1 << 20} {
		if err := CheckTopK(k); err != nil {
			t.Errorf("CheckTopK(%d) = %v, want nil", k, err)
		}
	}
	for k, want := range map[int]string{
		0:  "WithTopK: must be >= 1, got 0",
		-3: "WithTopK: must be >= 1, got -3",
	} {
		if err := CheckTopK(k); err == nil || err.Error() != want {
			t.Errorf("CheckTopK(%d) = %v, want %q", k, err, want)
		}
	}
}
