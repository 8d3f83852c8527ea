package prometheus

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// hold opens a connection to addr from local (nil: any) that holds a slot
// the way a client wanting to deny the endpoint would: mode 0 sends
// nothing, 1 sends a request and then nothing (an idle keep-alive whose
// answer it never reads), 2 sends half a request's headers.
func hold(t *testing.T, local net.Addr, addr string, mode int) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: local}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	switch mode {
	case 1:
		_, err = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	case 2:
		_, err = io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n")
	}
	if err != nil {
		// The server may have closed it already: it gave way.
		t.Logf("holding connection %d: %v", mode, err)
	}
	return c
}

// scrapeFresh fetches /metrics over a new connection, from local (nil:
// any); it tells whether it was answered with the exposition.
func scrapeFresh(local net.Addr, addr string) error {
	tr := &http.Transport{DisableKeepAlives: true, DialContext: (&net.Dialer{Timeout: 2 * time.Second, LocalAddr: local}).DialContext}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Timeout: 5 * time.Second, Transport: tr}).Get("http://" + addr + "/metrics")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "tttrace_lost_events_total") {
		return &net.AddrError{Err: "not the exposition: " + resp.Status, Addr: addr}
	}
	return nil
}

// Issue #32, 10: one peer cycling many idle or slow sockets (80, more
// than the 64 slots) must not keep a scrape from a fresh connection out,
// even from the same address (on 127.0.0.1 every local user is one peer).
func TestScrapeAmongHeldConnections(t *testing.T) {
	e := listen(t) // the defaults: 64 connections, 8 per peer
	addr := e.Addr().String()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for i := range 80 {
		held = append(held, hold(t, nil, addr, i%3))
	}
	time.Sleep(20 * time.Millisecond)
	answered := 0
	deadline := time.Now().Add(60 * time.Second)
	for round := 0; round < 16 && time.Now().Before(deadline); round++ {
		if err := scrapeFresh(nil, addr); err != nil {
			t.Logf("scrape %d: %v", round, err)
		} else {
			answered++
		}
		// The other side cycles: five old sockets closed, and as many
		// new ones as it takes to fill every slot freed.
		for _, c := range held[:5] {
			c.Close()
		}
		held = held[5:]
		time.Sleep(20 * time.Millisecond)
		for i := range 21 {
			held = append(held, hold(t, nil, addr, i%3))
		}
	}
	if answered != 16 {
		t.Fatalf("%d of 16 scrapes answered while one peer held 80 connections", answered)
	}
}

// Many peers (127.0.0.2 to 127.0.0.10, 8 connections each: 72, more than
// the 64 slots) filling the pool do not keep a new peer out: the peer
// holding the most gives way.
func TestScrapeAmongManyPeers(t *testing.T) {
	e := listen(t)
	addr := e.Addr().String()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for p := 2; p <= 10; p++ {
		local := &net.TCPAddr{IP: net.IPv4(127, 0, 0, byte(p))}
		probe, err := (&net.Dialer{LocalAddr: local, Timeout: 2 * time.Second}).Dial("tcp", addr)
		if err != nil {
			t.Skipf("cannot connect from %s: %v", local.IP, err)
		}
		held = append(held, probe)
		for i := range 7 {
			held = append(held, hold(t, local, addr, i%3))
		}
	}
	for round := range 4 {
		if err := scrapeFresh(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}, addr); err != nil {
			t.Fatalf("scrape %d from a new peer: %v", round, err)
		}
	}
}

// A request with a body is refused at once and its connection closed: a
// body trickled in must not keep a connection busy until ReadTimeout.
func TestRequestBodyRefused(t *testing.T) {
	e := listen(t)
	c, err := net.Dial("tcp", e.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("a request with a body: %s, want 400", resp.Status)
	}
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	if n, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("after the answer: read %d, %v; want the connection closed at once (%v)", n, err, time.Since(start))
	}
}

// The connection that gives way: one waiting for a request (new or idle)
// the longest; else the one whose answer has been blocked in a write the
// longest (its client does not read); never one answering a request.
func TestWaitingGivesWay(t *testing.T) {
	now := time.Now()
	at := func(ago time.Duration) time.Time { return now.Add(-ago) }
	conn := func(active bool, since time.Time, writing time.Time) *slotConn {
		c := &slotConn{active: active, since: since}
		if !writing.IsZero() {
			c.writing.Store(writing.UnixNano())
		}
		return c
	}
	answering := conn(true, at(time.Hour), time.Time{})
	stalledLong := conn(true, at(time.Minute), at(20*time.Second))
	stalledShort := conn(true, at(2*time.Minute), at(time.Second))
	idle := conn(false, at(time.Second), time.Time{})
	fresh := conn(false, at(time.Millisecond), time.Time{})
	for _, c := range []struct {
		name  string
		conns []*slotConn
		want  *slotConn
	}{
		{"waiting before stalled", []*slotConn{answering, stalledLong, fresh, idle}, idle},
		{"longest stalled", []*slotConn{answering, stalledShort, stalledLong}, stalledLong},
		{"only answering", []*slotConn{answering}, nil},
		{"newest last", []*slotConn{fresh, idle}, idle},
	} {
		if got := waiting(c.conns, now); got != c.want {
			t.Errorf("%s: %p gives way, want %p", c.name, got, c.want)
		}
	}
}
