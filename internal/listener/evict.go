package listener

import (
	"cmp"
	"net/http"
	"slices"
	"time"
)

// A connection is evicted only once it has been this long in its state:
// evictGrace for one that has sent nothing or is idle between requests,
// headerGrace for one whose request's header is still coming in; but
// pressGrace and pressHeaderGrace while a new connection waits in the
// accept queue. The places turn over no faster than the listener has
// places per grace (the probe's MaxListenerConns), and a scrape in the
// accept queue waits for every connection ahead of it: with the header
// grace, behind 200 clients trickling their headers it waited 5 s, behind
// 300 that sent "G" and nothing more (which gets past TCP_DEFER_ACCEPT)
// 6 s. The pressed graces are what a client has, during such a flood, to
// send its header once connected: a scraper sends it at once, in one
// packet, and from then on (its bytes waiting in the kernel, or its header
// being read) its server does not wait for it. A header begun and not
// finished, the server waiting, gets the shorter.
const (
	evictGrace       = 250 * time.Millisecond
	headerGrace      = time.Second
	pressGrace       = 50 * time.Millisecond
	pressHeaderGrace = 20 * time.Millisecond
)

// recheckEvery is how often a full Accept looks again for a connection
// that may be evicted while some are past their grace but their server
// has not caught up with what the client sent.
const recheckEvery = 50 * time.Millisecond

// evictable returns the connection without a request in progress to give
// its place to a new one, or, if none may yet, how long until Accept
// should look again (0: none may until a request ends, which wakes it).
//
// Only a connection whose server waits for its client may go: one the
// server's goroutine is reading from (or has not begun to read, in a
// connection whose client has sent nothing) while the kernel holds nothing
// from the client for it. A place is never taken from a client because the
// program was slow: under a CPU-bound load the connection's goroutine may
// wait a second or more to be scheduled, and a scrape whose request
// already waits in the kernel, or whose header the server is parsing, was
// evicted after headerGrace and failed with EOF (issue 26, item 14).
//
// A connection idle between requests goes first, after evictGrace: an HTTP
// client retries a request on a kept-alive connection that the server
// closed. Then one whose client has sent nothing, after evictGrace; then
// one whose request's header is still coming in, after headerGrace. When
// pressed (a connection waits to be accepted), they go after pressGrace,
// pressGrace and pressHeaderGrace instead. Among equals, the one furthest
// past its grace goes: the oldest, when pressed.
func (l *Listener) evictable(now time.Time, pressed bool) (*conn, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var wait time.Duration
	later := func(d time.Duration) {
		if wait == 0 || d < wait {
			wait = d
		}
	}
	// The connections past their grace, best first: the lowest rank,
	// then the furthest past its grace. Only then is each asked, in
	// turn, whether its server waits for its client, which asks the
	// kernel: under a flood every place is past its grace, and a
	// system call or two for each of them, at each new connection,
	// slowed the listener's turnover. The slice has room for every
	// place, made once by New: nothing is allocated per look.
	cands := l.cands[:0]
	// Closed connections must not stay reachable from the listener.
	defer clear(cands[:cap(cands)])
	for c := range l.open {
		if c.serving || c.state == http.StateActive {
			continue
		}
		rank, grace := 0, evictGrace
		if pressed {
			grace = pressGrace
		}
		if c.state != http.StateIdle {
			rank = 1
			if c.consumed.Load() > 0 {
				rank, grace = 2, headerGrace
				if pressed {
					grace = pressHeaderGrace
				}
			}
		}
		d := now.Sub(c.since.Add(grace))
		if d < 0 {
			later(-d)
			continue
		}
		cands = append(cands, candidate{c, rank, d})
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		if a.rank != b.rank {
			return cmp.Compare(a.rank, b.rank)
		}
		return cmp.Compare(b.overdue, a.overdue)
	})
	for _, k := range cands {
		if k.c.waitsForClient() {
			return k.c, 0
		}
		// The server is behind, not the client; it will read, parse
		// and serve, or soon wait (its Read wakes Accept): look again
		// then.
		later(recheckEvery)
	}
	return nil, wait
}

// candidate is a connection past its grace, for evictable to rank.
type candidate struct {
	c       *conn
	rank    int
	overdue time.Duration // how far past its grace
}
