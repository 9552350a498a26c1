//go:build !unix

package listener

import "net"

// peekSpoke cannot peek here: the listener goes by what the server has
// read.
func peekSpoke(net.Conn) (spoke, known bool) { return false, false }

// acceptPending cannot look at the accept queue here: a full listener
// takes it that a connection waits.
func acceptPending(net.Listener) (pending, known bool) { return false, false }
