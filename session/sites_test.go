package session

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
)

// stackRec is the native stack record of the alloc with sequence number
// seq: registers and a copy of the stack (here: nothing to unwind).
func stackRec(seq uint64, pid uint32, ip uint64) step {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, events.StackWire{Hdr: events.Header{Seq: seq, Pid: pid, Tid: pid, Kind: events.KindStack}, Ip: ip, Sp: 0x7ffd0000, Size: 64})
	b.Write(make([]byte, 64))
	return step{raw: b.Bytes()}
}

// An alloc whose stack follows is held, with what comes after it, until
// its stack record arrives: stream order is kept, the alloc and its leak
// carry the site, and the site is described before the first record naming
// it. An alloc whose stack was lost has no site and is counted.
func TestRunStacks(t *testing.T) {
	pid := uint32(os.Getpid()) // a live process: its maps are real
	ip := uint64(reflect.ValueOf(TestRunStacks).Pointer())
	h := newFakeHost()
	h.child = int(pid)
	a1 := alloc(pid, 0xb1, 0, events.DRAM, 0x20000, 4096)
	a1.rec.Stack = events.StackFollows
	a2 := alloc(pid, 0xb2, 0, events.L1, 0x30000, 512)
	a2.rec.Stack = events.StackLost
	between := alloc(pid, 0xb3, 0, events.L1, 0x40000, 256) // another CPU's, reserved after a1
	be := newFakeBackend(
		a1, between, a2,
		stackRec(a1.rec.Hdr.Seq, pid, ip),
		do(h.end(int(pid), 0, 0)),
	)
	be.attach["/opt/tt/libtt_metal.so"] = nil
	r := &recorder{}
	var nd bytes.Buffer
	cfg := Config{Command: []string{"workload"}, Lib: "/opt/tt/libtt_metal.so"}
	if _, err := run(context.Background(), cfg, be, h, []sinks.Sink{r, sinks.NewNDJSON(&nd, false)}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(nd.String()), "\n")
	var types []string
	for _, l := range lines {
		var head struct {
			Type string `json:"type"`
			Seq  uint64 `json:"seq"`
			Site uint32 `json:"site"`
		}
		if err := json.Unmarshal([]byte(l), &head); err != nil {
			t.Fatal(err)
		}
		types = append(types, head.Type)
		if head.Type == "alloc" && (head.Seq == a1.rec.Hdr.Seq) != (head.Site == 1) {
			t.Errorf("alloc seq %d has site %d: only the one whose stack came has site 1", head.Seq, head.Site)
		}
	}
	if want := "run site alloc alloc alloc exit summary"; strings.Join(types, " ") != want {
		t.Errorf("NDJSON %v, want %s:\n%s", types, want, nd.String())
	}
	var site devices.Site
	if err := json.Unmarshal([]byte(lines[1]), &site); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The test binary has no symbols (go test strips them): the frame is
	// the module and the pc.
	if len(site.Native) == 0 || site.Native[0].PC != ip || site.Native[0].Module != exe {
		t.Errorf("site %+v: its first frame is not this test's function at %#x in %s", site, ip, exe)
	}
	p := r.summary.Processes[0]
	if p.LostStacks != 1 || len(p.LeakSites) != 1 || p.LeakSites[0].Site != 1 || p.LeakSites[0].Bytes != 4096 || len(p.Sites) != 1 {
		t.Errorf("summary: lost_stacks %d, leak_sites %+v, sites %d", p.LostStacks, p.LeakSites, len(p.Sites))
	}
}

// A pid reused by a new process: each incarnation's leaks are described
// with its own stacks, never the other's (the ledger keeps the
// incarnations; each holds its stack state as its site source).
func TestRunStacksPidReused(t *testing.T) {
	self := uint32(os.Getpid()) // a live process: its maps are real
	ips := []uint64{uint64(reflect.ValueOf(TestRunStacks).Pointer()), uint64(reflect.ValueOf(TestRunStacksPidReused).Pointer())}
	h := newFakeHost()
	h.child = 900
	var script []step
	for _, ip := range ips {
		a := alloc(self, 0xb1, 0, events.DRAM, 0x20000, 4096)
		a.rec.Stack = events.StackFollows
		// Its end is applied when the ring is found empty (and empty
		// again by the drain before the end), before the pid's reuse.
		script = append(script, fork(900, self), a, stackRec(a.rec.Hdr.Seq, self, ip), groupExit(self), idle, idle)
	}
	script = append(script, do(h.end(900, 0, 0)), groupExit(900))
	be := newFakeBackend(script...)
	be.attach["/opt/tt/libtt_metal.so"] = nil
	r := &recorder{}
	cfg := Config{Command: []string{"workload"}, Follow: true, Lib: "/opt/tt/libtt_metal.so"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := run(ctx, cfg, be, h, []sinks.Sink{r})
	if err != nil {
		t.Fatal(err)
	}
	if res.Interrupted {
		t.Fatal("tracing did not end by itself")
	}
	var got []uint64
	for _, p := range r.summary.Processes {
		if p.Pid != self {
			continue
		}
		if len(p.Sites) != 1 || len(p.Sites[0].Native) == 0 || len(p.LeakSites) != 1 {
			t.Fatalf("incarnation %d: sites %+v, leak sites %+v", len(got), p.Sites, p.LeakSites)
		}
		got = append(got, p.Sites[0].Native[0].PC)
	}
	if len(got) != 2 || got[0] != ips[0] || got[1] != ips[1] {
		t.Errorf("the two incarnations' sites start at %#x, want %#x", got, ips)
	}
}
