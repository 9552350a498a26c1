//go:build unix

package probe

import (
	"net"
	"syscall"
)

// peekSpoke reports whether the client of c has sent bytes that nobody has
// read yet, or closed its side; known is false when it cannot tell. It
// peeks without blocking and without taking the connection's read lock
// (RawConn.Control, not Read: the server's goroutine may be blocked
// reading), so a connection whose server goroutine has not run yet is not
// taken for a silent one.
func peekSpoke(c net.Conn) (spoke, known bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, false
	}
	var n int
	var perr error
	var buf [1]byte
	if err := rc.Control(func(fd uintptr) {
		n, _, perr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}); err != nil {
		return false, false
	}
	switch {
	case perr == syscall.EAGAIN || perr == syscall.EWOULDBLOCK:
		return false, true // nothing sent
	case perr != nil:
		return false, false
	}
	// n > 0: bytes wait; n == 0: the client closed its side without
	// a word.
	return n > 0, true
}
