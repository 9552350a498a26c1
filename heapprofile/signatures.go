package heapprofile

import (
	"math/bits"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/gcprobe/probe/internal/symname"
	"github.com/gcprobe/probe/stackcapture"
)

// Signature names a family of allocations by the functions on their stacks.
type Signature struct {
	Name string
	// Frames are substrings of function names. A stack matches when,
	// from the allocation outward, it has a frame whose function contains
	// Frames[0], then further out one containing Frames[1], and so on.
	Frames []string
}

// SignatureStat is one signature's figures over the latest window.
type SignatureStat struct {
	Name string
	// AllocBytes is what the matching stacks allocated over the window,
	// AllocBytesPerSecond the same over the window's length, and
	// InUseBytes what their allocations hold now; scaled estimates, as a
	// Site's are.
	AllocBytes          int64
	AllocBytesPerSecond float64
	InUseBytes          int64
	// AllocShare and InUseShare are AllocBytes and InUseBytes as a
	// fraction of the whole profile's over the same window / now.
	AllocShare, InUseShare float64
	// Site is the line responsible: the first frame, outward of the last
	// matched frame, in the main module (debug.ReadBuildInfo().Main.Path,
	// or package main), else the first user/dependency frame outward of
	// it, of the matching stacks that allocated most in the window; zero
	// Frame if none. Matching stacks through one such line are summed
	// before the lines are compared; a stack with no such line is left
	// out of the comparison.
	Site stackcapture.Frame
}

// sigSlot is one line a signature's stacks go through (SignatureStat.Site)
// and what they allocated there over the window.
type sigSlot struct {
	sig   int
	frame stackcapture.Frame
	win   int64
}

// sigSlotKey finds a slot: a signature and a line.
type sigSlotKey struct {
	sig   int
	label string
}

// sigAcc is one signature's sums over a read.
type sigAcc struct {
	alloc, inuse int64
	best         int32 // the slot that allocated most, -1 if none
}

// mainModule returns the main module's path, "" if the binary has no
// build information.
func mainModule() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	return bi.Main.Path
}

// inMain reports whether f's function is in the main module (or package
// main, whose functions are named "main." whatever the module's path).
func inMain(f stackcapture.Frame, mainPath string) bool {
	pkg := symname.PkgPath(f.Function)
	return pkg == "main" || (mainPath != "" && (pkg == mainPath || strings.HasPrefix(pkg, mainPath+"/")))
}

// matchFrames returns the index in fs (innermost first) of the frame that
// matched want's last element, -1 if the stack does not match. Taking the
// first frame that matches each element leaves the most room for the
// next, so it finds a match whenever there is one.
func matchFrames(fs []stackcapture.Frame, want []string) int {
	j := 0
	for i := range fs {
		if strings.Contains(fs[i].Function, want[j]) {
			j++
			if j == len(want) {
				return i
			}
		}
	}
	return -1
}

// signatureSite returns the index of SignatureStat.Site's frame in fs, the
// stack of a match whose last matched frame is fs[last]: the first frame
// outward of it in the main module, else the first that user(i) says is
// the user's or a dependency's; -1 if neither.
func signatureSite(fs []stackcapture.Frame, last int, mainPath string, user func(i int) bool) int {
	for i := last + 1; i < len(fs); i++ {
		if inMain(fs[i], mainPath) {
			return i
		}
	}
	for i := last + 1; i < len(fs); i++ {
		if user(i) {
			return i
		}
	}
	return -1
}

// isUserFrame reports whether f, a frame runtime.CallersFrames gave for a
// profile's stack, is the user's or a dependency's as stackcapture classes
// it: its return PC (f.PC+1) is OriginUser and f is the frame there that
// stackcapture names.
func isUserFrame(f stackcapture.Frame) bool {
	pc := f.PC + 1
	if stackcapture.OriginOf(pc) != stackcapture.OriginUser {
		return false
	}
	sf := stackcapture.SiteFrameOfPC(pc)
	return sf != nil && sf.Function == f.Function
}

// matchSignatures finds the signatures stk matches, once, when its bucket
// is first seen: it symbolizes the stack and records the matches in b (a
// mask, and each match's slot in p.sigArena from b.sigAt).
func (p *Profiler) matchSignatures(stk []uintptr, b *bucket) {
	fs := p.frameBuf[:0]
	it := runtime.CallersFrames(stk)
	for {
		f, more := it.Next()
		fs = append(fs, stackcapture.Frame{Function: f.Function, File: f.File, Line: f.Line, PC: f.PC})
		if !more {
			break
		}
	}
	p.frameBuf = fs
	b.sigAt = int32(len(p.sigArena))
	for si, sig := range p.cfg.sigs {
		last := matchFrames(fs, sig.Frames)
		if last < 0 {
			continue
		}
		b.sigs |= 1 << si
		slot := int32(-1)
		if at := signatureSite(fs, last, p.mainPath, func(i int) bool { return isUserFrame(fs[i]) }); at >= 0 {
			slot = p.slotOf(si, fs[at])
		}
		p.sigArena = append(p.sigArena, slot)
	}
}

// slotOf returns the slot of signature si's line f, making it on first
// sight.
func (p *Profiler) slotOf(si int, f stackcapture.Frame) int32 {
	k := sigSlotKey{sig: si, label: f.String()}
	if i, ok := p.slotByKey[k]; ok {
		return i
	}
	i := int32(len(p.sigSlots))
	p.sigSlots = append(p.sigSlots, sigSlot{sig: si, frame: f})
	p.slotByKey[k] = i
	return i
}

// addSignatures adds a bucket's window bytes and in-use bytes (scaled) to
// the signatures it matches, and the window bytes to their lines.
func (p *Profiler) addSignatures(b *bucket, win, inuse int64) {
	k := b.sigAt
	for m := b.sigs; m != 0; m &= m - 1 {
		a := &p.sigAccs[bits.TrailingZeros32(m)]
		a.alloc += win
		a.inuse += inuse
		if slot := p.sigArena[k]; slot >= 0 {
			p.sigSlots[slot].win += win
		}
		k++
	}
}

// resetSignatures zeroes the sums before a read.
func (p *Profiler) resetSignatures() {
	for i := range p.sigAccs {
		p.sigAccs[i] = sigAcc{best: -1}
	}
	for i := range p.sigSlots {
		p.sigSlots[i].win = 0
	}
}

// renderSignatures fills the snapshot's signature figures after a read.
func (p *Profiler) renderSignatures() {
	sn := &p.snap
	sn.Signatures = sn.Signatures[:0]
	if len(p.cfg.sigs) == 0 {
		return
	}
	for i := range p.sigSlots {
		s := &p.sigSlots[i]
		a := &p.sigAccs[s.sig]
		if s.win > 0 && (a.best < 0 || s.win > p.sigSlots[a.best].win) {
			a.best = int32(i)
		}
	}
	sec := sn.Window.Seconds()
	for i, sig := range p.cfg.sigs {
		a := &p.sigAccs[i]
		st := SignatureStat{Name: sig.Name, AllocBytes: a.alloc, InUseBytes: a.inuse}
		if sec > 0 {
			st.AllocBytesPerSecond = float64(a.alloc) / sec
		}
		if sn.TotalAllocBytes > 0 {
			st.AllocShare = float64(a.alloc) / float64(sn.TotalAllocBytes)
		}
		if sn.TotalInUseBytes > 0 {
			st.InUseShare = float64(a.inuse) / float64(sn.TotalInUseBytes)
		}
		if a.best >= 0 {
			st.Site = p.sigSlots[a.best].frame
		}
		sn.Signatures = append(sn.Signatures, st)
	}
}
