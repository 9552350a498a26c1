package stackcapture

import (
	"os"
	"runtime"
	"testing"

	"github.com/gcprobe/probe/internal/cgocall"
	"github.com/gcprobe/probe/internal/testkit"
)

// The walk is calibrated on the process's first capture, wherever that
// comes from; it must still turn the walk on when that stack is deeper
// than the calibration reads, or a callback on a thread C created. Each
// case runs in a child process, where nothing has calibrated yet.
func TestCalibrationFromAnyStack(t *testing.T) {
	if child := os.Getenv(calibrationChildEnv); child != "" {
		var pcs [MaxDepth]uintptr
		capture := func() { Callers(0, pcs[:]) }
		switch child {
		case "deep":
			nest(400, capture)
		case "cthread":
			if err := cgocall.OnCThread(capture); err != nil {
				t.Fatal(err)
			}
		}
		if !FramePointerWalk() {
			t.Fatalf("the frame-pointer walk is off after calibrating on the %s stack", child)
		}
		return
	}
	if !haveFramePointers {
		t.Skip("no frame pointers on " + runtime.GOARCH + ": no walk to calibrate")
	}
	for _, child := range []string{"deep", "cthread"} {
		t.Run(child, func(t *testing.T) {
			if child == "cthread" && !cgocall.Available {
				t.Skip("built without cgo (no C compiler found, or CGO_ENABLED=0): no C thread to calibrate on")
			}
			if code, out := testkit.RunTest(t, "TestCalibrationFromAnyStack", []string{calibrationChildEnv + "=" + child}); code != 0 {
				t.Fatalf("child: exit %d\n%s", code, out)
			}
		})
	}
}

const calibrationChildEnv = "GCPROBE_STACKCAPTURE_CALIBRATION_CHILD"

// CallersChecked agrees with runtime.Callers and keeps the walk on where
// the walk is right; where it is wrong (here made so by a forged verdict
// that hides one of its frames as a wrapper), it returns runtime.Callers's
// stack and turns the walk off. The second case runs in a child process,
// since the walk stays off for good.
func TestCallersChecked(t *testing.T) {
	if !haveFramePointers {
		t.Skip("no frame pointers on " + runtime.GOARCH + ": CallersChecked is runtime.Callers")
	}
	check := func() (checked, slow []uintptr) {
		checked, slow = make([]uintptr, 64), make([]uintptr, 64)
		// One line, so that skip 0 is the same line for both.
		n, m := CallersChecked(0, checked), runtime.Callers(1, slow)
		return checked[:n], slow[:m]
	}
	if os.Getenv(checkedChildEnv) == "1" {
		var pc uintptr
		nest(2, func() {
			var pcs [4]uintptr
			Callers(1, pcs[:]) // the return address into nest
			pc = pcs[0]
		})
		if lookupVerdict(pc) == 0 {
			t.Fatal("no verdict cached for nest's return address")
		}
		storeVerdict(pc, uint64(pc)|vPresent|vWrapper|1<<vCountLow) // forged: a wrapper, hidden
		var checked, slow []uintptr
		nest(2, func() { checked, slow = check() })
		if !sameFrames(checked, slow) {
			t.Errorf("CallersChecked:%s\nruntime.Callers:%s", framesString(checked), framesString(slow))
		}
		if FramePointerWalk() {
			t.Error("the walk is still on after CallersChecked found it wrong")
		}
		return
	}
	var checked, slow []uintptr
	nest(3, func() { checked, slow = check() })
	if !sameFrames(checked, slow) {
		t.Errorf("CallersChecked:%s\nruntime.Callers:%s", framesString(checked), framesString(slow))
	}
	if !FramePointerWalk() {
		t.Fatal("the walk is off after a stack it got right")
	}
	if code, out := testkit.RunTest(t, "TestCallersChecked", []string{checkedChildEnv + "=1"}); code != 0 {
		t.Fatalf("child: exit %d\n%s", code, out)
	}
}

const checkedChildEnv = "GCPROBE_STACKCAPTURE_CHECKED_CHILD"
