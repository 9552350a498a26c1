package autostart_test

import (
	"fmt"

	"github.com/gcprobe/probe/autostart"
)

// Without GCPROBE_LISTEN in the environment, importing the package starts
// nothing. Run the program with GCPROBE_LISTEN=127.0.0.1:9464 and the
// probe serves its page at http://127.0.0.1:9464/debug/gcprobe/, logging
// its start to standard error as a JSON line.
func Example() {
	fmt.Println("started:", autostart.Probe() != nil)
	// Output: started: false
}
