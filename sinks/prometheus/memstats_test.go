package prometheus

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
)

// /v1/memory_stats serves each traced process's current window as of the
// last tick: its peak since the last mark, memory_stats per type.
func TestMemoryStatsEndpoint(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := serve(ln, Options{})
	defer e.Close()
	l := devices.NewLedger(devices.Options{})
	ts := uint64(0)
	apply := func(ev events.Event) {
		ts += 1000
		ev.Pid, ev.Tid, ev.TsNs, ev.DeviceKind, ev.Device, ev.OwnsData = 77, 77, ts, events.DeviceChip, 0x7f0000000000, true
		l.Apply(&ev)
	}
	tick := func() {
		e.Tick(&sinks.View{Now: time.Now(), Ledger: l, Procs: []sinks.Proc{{Pid: 77, Command: "serve"}}})
	}
	get := func(query string) (int, string) {
		resp, err := http.Get("http://" + e.Addr().String() + "/v1/memory_stats" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("content type %q", ct)
		}
		return resp.StatusCode, string(b)
	}
	peak := func(body string) (index int, name string, peak, inUse uint64) {
		var p memStatsProc
		if err := json.Unmarshal([]byte(body), &p); err != nil || p.Pid != 77 || len(p.Window.Devices) != 1 {
			t.Fatalf("%v: %s", err, body)
		}
		ms := p.Window.Devices[0].MemoryStats["dram"]
		return p.Window.Index, p.Window.Name, ms.PeakBytesInUse, ms.BytesInUse
	}
	apply(events.Event{Kind: events.KindAlloc, Object: 1, BufferType: events.DRAM, Size: 8192})
	apply(events.Event{Kind: events.KindFree, Object: 1})
	apply(events.Event{Kind: events.KindAlloc, Object: 2, BufferType: events.DRAM, Size: 1024})
	tick()
	code, body := get("?pid=77")
	if i, n, pk, in := peak(body); code != 200 || i != 0 || n != "" || pk != 8192 || in != 1024 {
		t.Errorf("before a mark: %d %s", code, body)
	}
	l.Mark("request 2", ts+1)
	apply(events.Event{Kind: events.KindAlloc, Object: 3, BufferType: events.DRAM, Size: 2048})
	tick()
	code, body = get("?pid=77")
	if i, n, pk, in := peak(body); code != 200 || i != 1 || n != "request 2" || pk != 3072 || in != 3072 {
		t.Errorf("after a mark: %d %s", code, body)
	}
	if code, body := get(""); code != 200 || !strings.HasPrefix(body, `{"processes":[{"pid":77,"window":{"index":1,"name":"request 2",`) {
		t.Errorf("every process: %d %s", code, body)
	}
	if code, body := get("?pid=78"); code != 404 || body != `{"error":"pid 78 is not traced"}`+"\n" {
		t.Errorf("unknown pid: %d %s", code, body)
	}
	if code, _ := get("?pid=x"); code != 400 {
		t.Errorf("bad pid: %d", code)
	}
}
