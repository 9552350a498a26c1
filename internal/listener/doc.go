// Package listener is the probe's bounded HTTP listener: a net.Listener
// that keeps at most a fixed number of connections open, and makes room
// for a new one by evicting a connection whose server waits for its client
// (silent, idle between requests, or trickling its header), never one
// whose request the program was slow to read. It is what WithListenAddr
// serves on, an unauthenticated listener that must stay reachable for a
// scrape while clients flood it (issue 26); it knows nothing of the probe.
//
// Use it with an http.Server of one's own, which sets the timeouts:
//
//	ln := listener.New(inner, 32)
//	ln.DeferAccept() // optional, before the first Accept
//	srv := &http.Server{
//		Handler:     ln.Handler(h),
//		ConnState:   ln.ConnState,
//		ConnContext: ln.ConnContext,
//	}
//	err := srv.Serve(ln)
//
// The listener judges a connection by what the server's goroutine does
// with it (in Read or not, the bytes its Reads returned) and by what the
// kernel says of it where the system lets it ask: bytes waiting to be read
// (MSG_PEEK, on Unix), bytes received (TCP_INFO, on Linux), connections
// waiting to be accepted (poll on the listening socket, on Unix), and
// connections held back for want of data (TCP_DEFER_ACCEPT, on Linux).
// Elsewhere it goes by what the server has read, and takes a full listener
// for one with a connection waiting.
//
// All exported methods are safe for concurrent use, except DeferAccept,
// which is called before the first Accept.
package listener
