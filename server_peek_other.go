//go:build !unix

package probe

import "net"

// peekSpoke cannot peek here: the listener goes by what the server has
// read.
func peekSpoke(net.Conn) (spoke, known bool) { return false, false }
