package listener

import (
	"context"
	"net"
	"net/http"
	"time"
)

// Handler returns h as the listener's connections are to be served. It
// marks the connection as serving a request, so that it is not evicted
// until the response is written (ConnContext must have put the connection
// in the request's context). Once more than half of the listener's places
// are taken, each response closes its connection instead of keeping it
// alive ("Connection: close"), so that busy clients take turns rather than
// hold every place. A request that carries a body is refused (refuseBody):
// nothing served here takes one.
func (l *Listener) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(*conn); ok {
			l.serving(c)
		}
		if l.OpenConns() > cap(l.slots)/2 {
			// Busy: let the next client have this place.
			w.Header().Set("Connection", "close")
		}
		if r.ContentLength != 0 {
			refuseBody(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// ConnContext is the server's ConnContext hook: it puts the connection in
// its requests' context, for Handler.
func (l *Listener) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// connKey is the request context key of the listener's connection.
type connKey struct{}

// refuseBody answers a request that carries a body (a declared length,
// or chunks) with 413 and closes its connection without reading the body:
// none of the listener's paths takes one. Left alone, net/http reads up to
// 256 KiB of an unread body before it writes the answer's header, and
// again after the handler returns, so as to keep the connection alive: a
// client that sent a GET with "Content-Length: 200000" and then a byte a
// second held its place, in a state never evicted, and one of the 8 scrape
// slots, for the whole read timeout (10 s); 64 of them made scrapes wait
// 17 s. "Connection: close" skips the first read; a read deadline already
// past ends the second at once. Refused rather than served, such a request
// costs no scrape: clients that send one and reconnect when answered do
// not flood the scrapes.
func refuseBody(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	// w is net/http's own, which sets deadlines: no error to expect.
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
	http.Error(w, "gcprobe: the listener takes no request body", http.StatusRequestEntityTooLarge)
}
