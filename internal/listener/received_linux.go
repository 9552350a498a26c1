package listener

import (
	"net"

	"golang.org/x/sys/unix"
)

// bytesReceived returns how many bytes the kernel has received from the
// client of c, read or not (TCP_INFO's tcpi_bytes_received, Linux 4.1 and
// later), and whether it could tell. Unlike what the server's reads
// account for, the kernel's count cannot lag behind a goroutine that took
// the bytes and was preempted before it noted them.
func bytesReceived(c net.Conn) (n uint64, known bool) {
	var info *unix.TCPInfo
	var ierr error
	if !withFD(c, func(fd int) {
		info, ierr = unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
	}) || ierr != nil {
		return 0, false
	}
	return info.Bytes_received, true
}
