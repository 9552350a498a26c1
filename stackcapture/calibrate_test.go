package stackcapture

import (
	"os"
	"os/exec"
	"runtime"
	"testing"

	"github.com/gcprobe/probe/internal/cgocall"
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
			cmd := exec.Command(os.Args[0], "-test.run=^TestCalibrationFromAnyStack$", "-test.count=1")
			cmd.Env = append(os.Environ(), calibrationChildEnv+"="+child)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
		})
	}
}

const calibrationChildEnv = "GCPROBE_STACKCAPTURE_CALIBRATION_CHILD"
