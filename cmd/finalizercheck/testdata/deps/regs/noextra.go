//go:build !regsextra

package regs

// Extra returns nil without the regsextra tag.
func Extra() *Conn { return nil }
