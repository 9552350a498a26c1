//go:build unix

package probe

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
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

// acceptPending reports whether a connection waits in l's accept queue
// (its socket polls readable), without accepting it; known is false when
// it cannot tell. On Linux, a connection the kernel holds back for want of
// data (TCP_DEFER_ACCEPT) is not in the queue yet.
func acceptPending(l net.Listener) (pending, known bool) {
	sc, ok := l.(syscall.Conn)
	if !ok {
		return false, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, false
	}
	var n int
	var perr error
	fds := []unix.PollFd{{Events: unix.POLLIN}}
	if err := rc.Control(func(fd uintptr) {
		fds[0].Fd = int32(fd)
		n, perr = unix.Poll(fds, 0)
	}); err != nil || perr != nil {
		return false, false
	}
	return n > 0 && fds[0].Revents&unix.POLLIN != 0, true
}
