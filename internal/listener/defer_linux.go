package listener

import (
	"net"
	"syscall"
	"time"
)

// deferAcceptSeconds is how long the kernel holds a connection whose client
// has sent nothing before it reaches the listener's accept queue
// (TCP_DEFER_ACCEPT, rounded up by the kernel to its SYN-ACK
// retransmissions).
const deferAcceptSeconds = 1

// deferAccept asks the kernel to hand the listener a connection only once
// its client has sent data (or deferAcceptSeconds have passed): a scrape
// then overtakes, in the accept queue, clients that connect and send
// nothing, instead of waiting behind each of them. Best effort: if the
// option cannot be set, the listener's eviction still bounds what silent
// clients hold. It returns how long a connection that reaches the
// listener silent has been silent at least: 0 if the option is not set.
func deferAccept(l net.Listener) time.Duration {
	var serr error
	if !withFD(l, func(fd int) {
		serr = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_DEFER_ACCEPT, deferAcceptSeconds)
	}) || serr != nil {
		return 0
	}
	return deferAcceptSeconds * time.Second
}
