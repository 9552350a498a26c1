//go:build !linux

package listener

import "net"

// bytesReceived cannot ask the kernel here: the listener goes by what the
// server has read and what waits to be read (peekSpoke).
func bytesReceived(net.Conn) (n uint64, known bool) { return 0, false }
