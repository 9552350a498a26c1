//go:build !linux

package listener

import (
	"net"
	"time"
)

// deferAccept does nothing here: only Linux has TCP_DEFER_ACCEPT. The
// listener's eviction bounds what silent clients hold.
func deferAccept(net.Listener) time.Duration { return 0 }
