package stackcapture

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/gcprobe/probe/internal/bounded"
)

// DefaultLimit is the number of distinct stacks a Table keeps by default.
const DefaultLimit = 4096

// MaxLimit is the largest limit WithLimit accepts. A table's index grows
// with the stacks it holds, 11 to 22 bytes a stack (at most 32 MiB at
// MaxLimit), and each stack kept takes about 50 bytes plus 8 per PC.
const MaxLimit = 1 << 21

// Stack is an interned stack: its PCs, stored once in a slice of their
// own length. Site symbolizes on first use and caches the frame; Frames
// symbolizes on each call, so that a table of many stacks holds PCs, not
// frames.
type Stack struct {
	pcs      []uintptr
	site     atomic.Pointer[Frame]
	overflow bool
}

// overflowSite is the site of every table's overflow stack.
var overflowSite = Frame{Function: "gcprobe.overflow", File: "(stack table full)"}

// PCs returns the stack's return program counters, innermost first. The
// caller must not modify the slice.
func (s *Stack) PCs() []uintptr { return s.pcs }

// Overflow reports whether s is the table's overflow stack, which stands for
// every stack the table had no room for.
func (s *Stack) Overflow() bool { return s.overflow }

// Frames returns the symbolized frames, innermost first, inlined calls
// expanded. Each call symbolizes the stack anew and returns a new slice,
// which the caller may keep.
func (s *Stack) Frames() []Frame {
	if s.overflow {
		return []Frame{overflowSite}
	}
	return symbolize(s.pcs)
}

// Site returns the stack's first frame outside the runtime and gcprobe.
// The first call symbolizes as far as that frame; later ones return the
// cached frame.
func (s *Stack) Site() Frame {
	if f := s.site.Load(); f != nil {
		return *f
	}
	fp := &overflowSite
	if !s.overflow {
		fp = cachedSite(s.pcs)
	}
	// Racing first calls compute the same frame: whichever is stored, the
	// answer is the same.
	s.site.CompareAndSwap(nil, fp)
	return *fp
}

// cachedSite returns the site of pcs, the frame siteOfPCs finds, where
// PCFrames keeps it, so that the many stacks into one site share one frame
// (48 bytes a stack, 0.5 MB at 10 000 stacks): the first frame outside the
// runtime and gcprobe, in one pass over the PCs' cached expansions. A PC
// that runtime.Callers wrote for an inlined call expands to the frames the
// PCs after it stand for too; they come again after it, in the same order,
// so the first frame that qualifies is the same.
func cachedSite(pcs []uintptr) *Frame {
	var last *Frame
	for _, pc := range pcs {
		fs := PCFrames(pc)
		for i := range fs {
			if !isInternal(fs[i]) {
				return &fs[i]
			}
			last = &fs[i]
		}
	}
	if last == nil { // no PC symbolized
		f := siteOfPCs(pcs)
		return &f
	}
	return last
}

// Table interns stacks. The zero value is not usable; call NewTable.
//
// The stacks' PCs are their keys: the index holds no copy of them, and
// lookups compare a stack's length and PCs with the PCs asked for.
type Table struct {
	m        *bounded.Map[struct{}, Stack]
	overflow Stack
}

// Option configures a Table.
type Option func(*config) error

type config struct {
	limit int
}

// WithLimit sets how many distinct stacks the table keeps (default
// DefaultLimit, 1 to MaxLimit). Past it, new stacks are folded into the
// overflow stack.
func WithLimit(n int) Option {
	return func(c *config) error {
		if n <= 0 || n > MaxLimit {
			return fmt.Errorf("stackcapture: WithLimit: limit must be in [1, %d], got %d", MaxLimit, n)
		}
		c.limit = n
		return nil
	}
}

// NewTable returns an empty table.
func NewTable(opts ...Option) (*Table, error) {
	c := config{limit: DefaultLimit}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("stackcapture: NewTable: nil Option")
		}
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	t := &Table{m: bounded.New[struct{}, Stack](c.limit)}
	t.overflow.overflow = true
	return t, nil
}

// Intern returns the stack for pcs, storing it on first sight. Stacks
// deeper than MaxDepth are cut to MaxDepth. When the table is full, a new
// stack is not stored and Intern returns the overflow stack. Interning a
// stack already in the table allocates nothing.
func (t *Table) Intern(pcs []uintptr) *Stack {
	if len(pcs) > MaxDepth {
		pcs = pcs[:MaxDepth]
	}
	h := hashPCs(pcs)
	// The closures do not escape (bounded only calls them), so a hit
	// allocates nothing; a miss allocates the node and one right-sized
	// copy of the PCs.
	s := t.m.LoadOrInitFunc(h,
		func(s *Stack) bool { return slices.Equal(s.pcs, pcs) },
		func(s *Stack) { s.pcs = slices.Clone(pcs) })
	if s == nil {
		return &t.overflow
	}
	return s
}

// Len returns the number of distinct stacks stored.
func (t *Table) Len() int { return t.m.Len() }

// Limit returns the most stacks the table stores.
func (t *Table) Limit() int { return t.m.Limit() }

// Overflowed returns how many interns were refused for lack of room and
// folded into the overflow stack.
func (t *Table) Overflowed() uint64 { return t.m.Overflow() }

// hashPCs mixes the PCs; it needs to spread return addresses, not resist
// an adversary. Two lanes take alternate PCs, so that the multiplications
// of one do not wait on the other's, and are folded at the end.
func hashPCs(pcs []uintptr) uint64 {
	a := uint64(len(pcs)) * 0x9e3779b97f4a7c15
	b := uint64(0x94d049bb133111eb)
	i := 0
	for ; i+1 < len(pcs); i += 2 {
		a = (a ^ uint64(pcs[i])) * 0xbf58476d1ce4e5b9
		b = (b ^ uint64(pcs[i+1])) * 0x94d049bb133111eb
		a ^= a >> 29
		b ^= b >> 32
	}
	if i < len(pcs) {
		a = (a ^ uint64(pcs[i])) * 0xbf58476d1ce4e5b9
	}
	h := (a ^ b>>31 ^ b<<33) * 0x9e3779b97f4a7c15
	return h ^ h>>32
}

// HashPCs hashes a stack the way Intern does. It is for callers that keep
// their own tables keyed by stack.
func HashPCs(pcs []uintptr) uint64 { return hashPCs(pcs) }

// HashPC hashes a single PC the way Intern hashes a one-frame stack. It is
// for callers that keep their own tables keyed by call site.
func HashPC(pc uintptr) uint64 { return hashPCs([]uintptr{pc}) }
