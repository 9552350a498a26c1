//go:build unix

package listener

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
	var n int
	var perr error
	var buf [1]byte
	if !withFD(c, func(fd int) {
		n, _, perr = syscall.Recvfrom(fd, buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	}) {
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
	var n int
	var perr error
	fds := []unix.PollFd{{Events: unix.POLLIN}}
	if !withFD(l, func(fd int) {
		fds[0].Fd = int32(fd)
		n, perr = unix.Poll(fds, 0)
	}) || perr != nil {
		return false, false
	}
	return n > 0 && fds[0].Revents&unix.POLLIN != 0, true
}

// withFD calls f with the file descriptor of x, a connection or a
// listener, under its RawConn.Control (no read lock is taken: the
// server's goroutine may be blocked reading). It returns false, without
// calling f, if x has no descriptor to give.
func withFD(x any, f func(fd int)) bool {
	sc, ok := x.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	return rc.Control(func(fd uintptr) { f(int(fd)) }) == nil
}
