package prometheus

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// The endpoint's connections are a bounded pool (Options.MaxConns) that a
// client opening and holding sockets must not be able to take from a
// scraper (issue #32, 10: one user cycling 80 idle sockets held all 64
// slots). Timeouts alone cannot stop that: a closed socket is reopened at
// once. So the pool is shared out:
//
//   - a peer (a remote IPv4 address, or IPv6 /64) holds at most
//     MaxConnsPerPeer connections; a new connection of a peer at its bound
//     takes the place of that peer's connection that waits the longest
//     (one that has sent no complete request yet, or is idle between
//     requests, oldest first; else one whose answer has been blocked in a
//     write the longest: its client does not read). Within one address —
//     on 127.0.0.1 every local user is one peer — the newest connection
//     wins, so a scrape, which sends its request at once, is served
//     however many sockets others hold open;
//   - when the pool is full, a new connection takes the place of such a
//     waiting connection of the peer holding the most, if that peer holds
//     more than the newcomer's: one peer cannot keep others out;
//   - a connection answering a request whose client reads is never closed
//     for another;
//   - a request with a body is refused and its connection closed at once,
//     without waiting for the body (noBody): a body trickled in would keep
//     its connection busy until ReadTimeout.
//
// When no connection can give way, the new one is closed at once.

// peerListener admits connections into the pool (Accept) and follows
// their state (connState, the http.Server's ConnState hook).
type peerListener struct {
	net.Listener
	max, perPeer int

	mu    sync.Mutex
	peers map[string][]*slotConn // the connections each peer holds, in admission order
	n     int                    // connections held
}

func newPeerListener(ln net.Listener, max, perPeer int) *peerListener {
	return &peerListener{Listener: ln, max: max, perPeer: perPeer, peers: map[string][]*slotConn{}}
}

// slotConn is a connection holding a slot of the pool.
type slotConn struct {
	net.Conn
	l    *peerListener
	peer string

	// Guarded by l.mu.
	held   bool // counted in l; false once closed or evicted
	active bool // between reading a request and finishing its answer
	since  time.Time

	// writing: when the Write in progress began (unix ns), 0 when none.
	writing atomic.Int64
	once    sync.Once
}

// peerOf is the peer a remote address counts for: the IP (IPv4-mapped
// addresses as IPv4), an IPv6 address's /64 (one host's share).
func peerOf(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	ip, ok := netip.AddrFromSlice(ta.IP)
	if !ok {
		return a.String()
	}
	ip = ip.Unmap()
	if ip.Is6() {
		return netip.PrefixFrom(ip, 64).Masked().String()
	}
	return ip.String()
}

func (l *peerListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		sc, victim := l.admit(c)
		if victim != nil {
			_ = victim.Conn.Close() // its server goroutine ends on the error
		}
		if sc != nil {
			return sc, nil
		}
		_ = c.Close()
	}
}

// admit takes c into the pool, making room if need be; it returns the
// connection to close for it (nil: none), and nil for c when there is no
// room.
func (l *peerListener) admit(c net.Conn) (sc, victim *slotConn) {
	now := time.Now()
	p := peerOf(c.RemoteAddr())
	l.mu.Lock()
	defer l.mu.Unlock()
	mine := l.peers[p]
	switch {
	case len(mine) >= l.perPeer:
		victim = waiting(mine, now)
	case l.n >= l.max:
		// The most-holding peer gives way, if it holds more than p.
		most := len(mine)
		for q, conns := range l.peers {
			if q == p || len(conns) <= most {
				continue
			}
			if v := waiting(conns, now); v != nil {
				victim, most = v, len(conns)
			}
		}
	}
	if victim != nil {
		l.drop(victim)
	} else if len(mine) >= l.perPeer || l.n >= l.max {
		return nil, nil
	}
	sc = &slotConn{Conn: c, l: l, peer: p, held: true, since: now}
	l.peers[p] = append(l.peers[p], sc)
	l.n++
	return sc, victim
}

// waiting is the connection of conns that may give way, nil if none: the
// one waiting for a request the longest (new or idle), else the one whose
// answer has been blocked in a write the longest.
func waiting(conns []*slotConn, now time.Time) *slotConn {
	var best *slotConn
	var bestStalled bool
	var bestSince time.Time
	for _, c := range conns {
		stalled, since := false, c.since
		if c.active {
			w := c.writing.Load()
			if w == 0 {
				continue // answering, not blocked
			}
			stalled, since = true, time.Unix(0, w)
		}
		if best == nil || (!stalled && bestStalled) || (stalled == bestStalled && since.Before(bestSince)) {
			best, bestStalled, bestSince = c, stalled, since
		}
	}
	return best
}

// drop takes c out of the pool (l.mu held).
func (l *peerListener) drop(c *slotConn) {
	if !c.held {
		return
	}
	c.held = false
	l.n--
	conns := l.peers[c.peer]
	for i, x := range conns {
		if x == c {
			conns = append(conns[:i], conns[i+1:]...)
			break
		}
	}
	if len(conns) == 0 {
		delete(l.peers, c.peer)
	} else {
		l.peers[c.peer] = conns
	}
}

// connState follows a connection's state (http.Server.ConnState).
func (l *peerListener) connState(c net.Conn, s http.ConnState) {
	sc, ok := c.(*slotConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case http.StateActive:
		sc.active, sc.since = true, time.Now()
	case http.StateIdle:
		sc.active, sc.since = false, time.Now()
	case http.StateHijacked, http.StateClosed:
		l.drop(sc)
	}
}

func (c *slotConn) Write(b []byte) (int, error) {
	c.writing.Store(time.Now().UnixNano())
	n, err := c.Conn.Write(b)
	c.writing.Store(0)
	return n, err
}

func (c *slotConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.drop(c)
		c.l.mu.Unlock()
	})
	return err
}

// noBody refuses requests that carry a body (a scrape has none) and
// closes their connection without reading it.
func noBody(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 { // -1: chunked
			// The server would read up to 256 KiB of the body after
			// the answer, for as long as ReadTimeout: it must not.
			_ = http.NewResponseController(w).SetReadDeadline(time.Now())
			w.Header().Set("Connection", "close")
			http.Error(w, "tttrace: a request with a body is not served", http.StatusBadRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}
