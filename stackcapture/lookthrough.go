package stackcapture

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/gcprobe/probe/internal/symname"
)

// Looking through wrappers.
//
// A helper that only forwards to a registering call (a filesystem's
// one-line Open, a lock helper, a user's openConfig) would be the site of
// everything its callers register: the line a user must change is the
// caller's. A function in the look-through set is classed as the
// standard library's is: a site skips its frames and is its caller's
// line, and the helper stays in the stack. The set holds functions by
// their full name ("example.com/fs.OsFS.Open",
// "example.com/x.(*Locker).Lock") and packages by their path
// ("example.com/fs": every function in it). It is process-wide, as the
// classes of frames are: SetLookThrough replaces the names given by
// option, LookThrough adds one that a ledger found forwarding for more
// than one caller. Sites counted before a name is added keep what they
// counted; later registrations through it go to the callers' lines.

type lookSet struct {
	names map[string]bool // functions and packages
}

var (
	look    atomic.Pointer[lookSet]
	lookMu  sync.Mutex // orders changes of look
	lookGen atomic.Uint32
	// lookUser and lookAuto are the names given by SetLookThrough and
	// those LookThrough added, under lookMu.
	lookUser, lookAuto []string
)

// maxLookThrough bounds the set: past it, LookThrough adds nothing.
const maxLookThrough = 1024

// SetLookThrough makes sites look through the functions and packages
// named: a registration made in one of them (or in the standard library
// on its behalf) is counted at the first frame above that is neither. It
// replaces the names of an earlier call, and keeps those LookThrough
// added. A name must be a function's full name or a package path, with
// no spaces.
func SetLookThrough(names ...string) error {
	if err := CheckLookThrough(names...); err != nil {
		return fmt.Errorf("stackcapture: SetLookThrough: %w", err)
	}
	lookMu.Lock()
	defer lookMu.Unlock()
	lookUser = append([]string(nil), names...)
	publishLocked()
	return nil
}

// CheckLookThrough returns an error for a name SetLookThrough refuses: an
// empty one, or one with spaces.
func CheckLookThrough(names ...string) error {
	for _, n := range names {
		if n == "" || strings.ContainsAny(n, " \t\n") {
			return fmt.Errorf("%q is not a function name or a package path", n)
		}
	}
	return nil
}

// LookThrough adds the function named fn to the look-through set, and
// reports whether it was added (false if it was there, or the set is
// full).
func LookThrough(fn string) bool {
	if lookingThrough(fn) {
		return false
	}
	lookMu.Lock()
	defer lookMu.Unlock()
	if len(lookAuto) >= maxLookThrough || lookingThrough(fn) {
		return false
	}
	lookAuto = append(lookAuto, fn)
	publishLocked()
	return true
}

func publishLocked() {
	s := &lookSet{names: make(map[string]bool, len(lookUser)+len(lookAuto))}
	for _, n := range lookUser {
		s.names[n] = true
	}
	for _, n := range lookAuto {
		s.names[n] = true
	}
	if len(s.names) == 0 {
		s = nil
	}
	look.Store(s)
	lookGen.Add(1) // OriginOf's answers before are stale
}

// lookingThrough reports whether the function fn is in the look-through
// set, by its name or its package's path.
func lookingThrough(fn string) bool {
	s := look.Load()
	if s == nil {
		return false
	}
	if i := strings.IndexByte(fn, '['); i >= 0 {
		fn = fn[:i]
	}
	return s.names[fn] || s.names[symname.PkgPath(fn)]
}

// LookedThrough reports whether a frame at return PC pc (inlined calls
// expanded) is in a function of the look-through set.
func LookedThrough(pc uintptr) bool {
	if look.Load() == nil {
		return false
	}
	for _, f := range PCFrames(pc) {
		if lookingThrough(f.Function) {
			return true
		}
	}
	return false
}

// OriginGeneration returns the generation of the look-through set, which
// every change of it (SetLookThrough) advances: a caller that keeps what it
// derived from OriginOf's answers keeps it with the generation it read
// before asking, and drops it once the generation moved.
func OriginGeneration() uint32 { return lookGen.Load() }
