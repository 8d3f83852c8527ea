package session

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/pyframes"
	"github.com/tttrace/tttrace/sinks"
	"github.com/tttrace/tttrace/stacks"
)

// The session's own per-record path (handle: decode, allocation sites,
// ledger, sinks) on the record mix of the replica's burst (ttwork
// --scenario burst): two threads, each allocating and freeing a small
// buffer in a loop, DRAM and L1 in turn, on a chip whose bank managers
// were seen made; each alloc follows its BankManager::allocate_buffer
// request, and its native stack is known to the kernel after the first:
// its token is in the alloc itself (STACK_TOKEN, bpf/stack.h), or, in the
// L1 round here, in a stack record after it (as in a process whose
// Python stack goes with the alloc).

// burstStream is the burst's records, raw as the ring hands them out.
type burstStream struct {
	pid   uint32
	ip    uint64   // of the native stacks
	setup [][]byte // the bank managers made, and a first alloc whose stack is copied
	loop  [][]byte // one round: request, alloc, stack token, free on each thread
	seq   uint64
}

const (
	burstDRAMMgr = 0x562b41754300
	burstL1Mgr   = 0x562b41754a50
	burstTidA    = 1001
	burstTidB    = 1002
)

// rawRecord copies the wire struct w into a new, 8-byte aligned record,
// with extra zero bytes after it.
func rawRecord[T any](w *T, extra int) []byte {
	n := int(unsafe.Sizeof(*w))
	buf := make([]uint64, (n+extra+7)/8)
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), n+extra)
	copy(raw, unsafe.Slice((*byte)(unsafe.Pointer(w)), n))
	return raw
}

func newBurstStream(pid uint32, ip uint64) *burstStream {
	b := &burstStream{pid: pid, ip: ip}
	for _, m := range []struct {
		ptr  uint64
		typ  events.BufferType
		size uint64
	}{{burstDRAMMgr, events.DRAM, 1 << 30}, {burstL1Mgr, events.L1, 1 << 20}} {
		w := events.AllocCapacityWire{Hdr: b.hdr(events.KindAllocCapacity, pid), Manager: m.ptr, Device: 0x7f0000, DeviceKind: events.DeviceChip,
			BufferType: int32(m.typ), Banks: 1, BankSize: m.size, Alignment: 32, Base: 0x10000}
		b.setup = append(b.setup, rawRecord(&w, 0))
	}
	// The first alloc: its stack is copied, unwound and made known.
	b.setup = append(b.setup, b.request(burstTidA, burstDRAMMgr), b.buffer(events.KindAlloc, burstTidA, events.DRAM, events.StackFollows),
		b.stack(burstTidA, false), b.buffer(events.KindFree, burstTidA, events.DRAM, 0))
	// The two threads' calls interleave as on two CPUs.
	b.loop = append(b.loop,
		b.request(burstTidA, burstDRAMMgr), b.request(burstTidB, burstDRAMMgr),
		b.buffer(events.KindAlloc, burstTidA, events.DRAM, events.StackToken),
		b.buffer(events.KindAlloc, burstTidB, events.DRAM, events.StackToken),
		b.buffer(events.KindFree, burstTidA, events.DRAM, 0), b.buffer(events.KindFree, burstTidB, events.DRAM, 0),
		b.request(burstTidA, burstL1Mgr), b.request(burstTidB, burstL1Mgr),
		b.buffer(events.KindAlloc, burstTidA, events.L1, events.StackFollows), b.stack(burstTidA, true),
		b.buffer(events.KindAlloc, burstTidB, events.L1, events.StackFollows), b.stack(burstTidB, true),
		b.buffer(events.KindFree, burstTidA, events.L1, 0), b.buffer(events.KindFree, burstTidB, events.L1, 0))
	return b
}

// pythonLoop is a round of the burst in a process running CPython: each
// alloc is followed by its Python stack (frames deep, one stack per
// thread) and then its native stack's record, known.
func (b *burstStream) pythonLoop(frames int) [][]byte {
	var loop [][]byte
	for _, typ := range []events.BufferType{events.DRAM, events.L1} {
		mgr := uint64(burstDRAMMgr)
		if typ == events.L1 {
			mgr = burstL1Mgr
		}
		loop = append(loop, b.request(burstTidA, mgr), b.request(burstTidB, mgr))
		for _, tid := range []uint32{burstTidA, burstTidB} {
			w := events.PyStackWire{Hdr: b.hdr(events.KindPyStack, tid)}
			w.Stack.Tstate, w.Stack.Nframes = 0x7f00a000+uint64(tid), uint32(frames)
			for i := range frames {
				w.Stack.Frames[i] = events.PyFrame{Code: 0x7f1200000000 + uint64(i)*0x1000 + uint64(tid), Instr: 0x7f1300000000 + uint64(i)*0x40, CodeID: uint64(i + 1)}
			}
			loop = append(loop, b.buffer(events.KindAlloc, tid, typ, events.StackFollows), rawRecord(&w, 0), b.stack(tid, true))
		}
		loop = append(loop, b.buffer(events.KindFree, burstTidA, typ, 0), b.buffer(events.KindFree, burstTidB, typ, 0))
	}
	return loop
}

func (b *burstStream) hdr(kind events.Kind, tid uint32) events.Header {
	return events.Header{Pid: b.pid, Tid: tid, Kind: kind}
}

func (b *burstStream) request(tid uint32, mgr uint64) []byte {
	w := events.AllocRequestWire{Hdr: b.hdr(events.KindAllocRequest, tid), Manager: mgr, Size: 32, PageSize: 32, BottomUp: 1}
	return rawRecord(&w, 0)
}

func (b *burstStream) buffer(kind events.Kind, tid uint32, typ events.BufferType, stack events.StackState) []byte {
	w := events.Wire{Hdr: b.hdr(kind, tid), Object: 0x7f3bec000b80 + uint64(tid)*0x1000, Device: 0x7f0000, DeviceKind: events.DeviceChip,
		BufferType: int32(typ), Address: 0x10000 + uint64(tid-burstTidA)*0x40, Size: 32, PageSize: 32, OwnsData: 1, Status: 1, Stack: stack}
	if stack == events.StackToken {
		w.StackToken = 1
	}
	return rawRecord(&w, 0)
}

// stack is the native stack record of the alloc before it: copied, or
// known (its token).
func (b *burstStream) stack(tid uint32, known bool) []byte {
	w := events.StackWire{Hdr: b.hdr(events.KindStack, tid), Ip: b.ip, Sp: 0x7ffd0000, Size: 64}
	if known {
		w.Flags, w.Token, w.Size = events.StackKnown, 1, 0
		return rawRecord(&w, 0)
	}
	return rawRecord(&w, 64)
}

// stamp gives raw the next seq (a stack record its alloc's) and a time.
func (b *burstStream) stamp(raw []byte) {
	h := (*events.Header)(unsafe.Pointer(&raw[0]))
	if h.Kind != events.KindStack && h.Kind != events.KindPyStack {
		b.seq++
	}
	h.Seq = b.seq
	h.TsNs = 1_000_000_000 + b.seq*1000
}

func (b *burstStream) play(s *session, recs [][]byte) {
	for _, raw := range recs {
		b.stamp(raw)
		s.handle(raw)
	}
}

// burstConfigs are the outputs of the three modes the burst is measured
// in: --json, --json --no-events, and the human report.
var burstConfigs = []struct {
	name string
	make func(w io.Writer) sinks.Sink
}{
	{"JSON", func(w io.Writer) sinks.Sink { return sinks.NewNDJSON(w, false) }},
	{"NoEvents", func(w io.Writer) sinks.Sink { return sinks.NewNDJSON(w, true) }},
	{"Report", func(w io.Writer) sinks.Sink { return sinks.NewReport(w) }},
}

// burstSession is a session tracing this test process (its maps are
// real, so the first stack is unwound) with out, and the burst played
// once: the ledger, the sites and the sinks' buffers have warmed up.
func burstSession(tb testing.TB, out sinks.Sink) (*session, *burstStream) {
	tb.Helper()
	pid := uint32(os.Getpid())
	ip := uint64(reflect.ValueOf(TestRunStacks).Pointer())
	h := newFakeHost()
	cfg := Config{PIDs: []int{int(pid)}, KnownStacks: true}
	s := newSession(cfg, newFakeBackend(), h, []sinks.Sink{out}, nil)
	s.track(pid, devices.ProcessInfo{Command: "ttwork --scenario burst"}, true, false)
	b := newBurstStream(pid, ip)
	b.play(s, b.setup)
	if ps := s.sites.procs[pid]; ps == nil || len(ps.tokens) == 0 {
		// The copied stack did not unwind to one fixed by its pcs: name it
		// as the kernel would after learning it.
		if ps == nil || len(ps.sites) == 0 {
			tb.Fatal("the first alloc's stack was not interned")
		}
		ps.tokens = map[uint64]stacks.StackID{1: ps.sites[0].native}
	}
	for range 64 {
		b.play(s, b.loop)
	}
	warming.Wait() // the files' warm-ups (warmFiles) allocate on their goroutine
	return s, b
}

// The burst's records allocate nothing in the session once warmed up, in
// every output mode: at a million records a second, a few hundred bytes
// a record make the collector run every few milliseconds, on the CPUs
// the traced program needs.
func TestBurstRecordsAllocateNothing(t *testing.T) {
	for _, c := range burstConfigs {
		t.Run(c.name, func(t *testing.T) {
			var out bytes.Buffer
			out.Grow(16 << 20) // its growth is not the session's
			s, b := burstSession(t, c.make(&out))
			per := testing.AllocsPerRun(100, func() { b.play(s, b.loop) }) / float64(len(b.loop))
			if per != 0 {
				t.Errorf("%.2f allocations per record", per)
			}
			p := s.ledger.Summary().Processes[0]
			if len(p.Anomalies) != 0 || p.Stats.AllocFailures != 0 || p.Stats.AllocRequests != p.Stats.Allocs || p.LostStacks != 0 {
				t.Errorf("the burst is not on its normal path: anomalies %v, stats %+v, %d lost stacks", p.Anomalies, p.Stats, p.LostStacks)
			}
			if a := s.sites; len(a.procs[b.pid].sites) != 1 || a.copied != 1 || a.known != p.Stats.Allocs-1 || a.staleKnown != 0 {
				t.Errorf("sites: %d interned, %d stacks copied, %d known (%d stale), for %d allocs", len(a.procs[b.pid].sites), a.copied, a.known, a.staleKnown, p.Stats.Allocs)
			}
			for _, d := range p.Devices {
				if d.Allocator == nil || d.Allocator.DRAM == nil || d.Allocator.DRAM.TotalAllocated == nil || d.Allocator.L1 == nil || d.Allocator.L1.TotalAllocated == nil {
					t.Errorf("chip %d: the allocator's state is not modelled: %+v", d.Device, d.Allocator)
				}
			}
			if c.name != "JSON" {
				return
			}
			if err := s.sinks[0].Close(); err != nil {
				t.Fatal(err)
			}
			counts := map[string]int{}
			for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				var head struct {
					Type string `json:"type"`
					Site uint32 `json:"site"`
				}
				if err := json.Unmarshal([]byte(l), &head); err != nil {
					t.Fatalf("%v: %s", err, l)
				}
				counts[head.Type]++
				if head.Type == "alloc" && head.Site != 1 {
					t.Errorf("alloc without its site: %s", l)
				}
			}
			if counts["site"] != 1 || counts["alloc_capacity"] != 2 || counts["alloc"] != counts["alloc_request"] || counts["alloc"] != counts["free"] || counts["alloc"] == 0 {
				t.Errorf("lines by type: %v", counts)
			}
		})
	}
}

// In a process running CPython each alloc's Python stack comes in its own
// record before the native stack's: interning one seen before allocates
// nothing either. (Not with --json, whose site lines would symbolize the
// Python frames with a real interpreter.)
func TestPythonStackRecordsAllocateNothing(t *testing.T) {
	for _, c := range burstConfigs {
		if c.name == "JSON" {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			s, b := burstSession(t, c.make(io.Discard))
			ps := s.sites.procs[b.pid]
			ps.py = &pyframes.Process{} // its interpreter registered: onPyStack needs nothing more of it
			loop := b.pythonLoop(24)
			b.play(s, loop)
			per := testing.AllocsPerRun(100, func() { b.play(s, loop) }) / float64(len(loop))
			if per != 0 {
				t.Errorf("%.2f allocations per record", per)
			}
			// Two Python stacks (one per thread), each with the one native
			// stack: two more sites.
			if len(ps.pyRaw) != 2 || len(ps.sites) != 3 || len(ps.pyRaw[0].Frames) != 24 {
				t.Errorf("%d Python stacks interned (%d frames), %d sites", len(ps.pyRaw), len(ps.pyRaw[0].Frames), len(ps.sites))
			}
		})
	}
}

// BenchmarkSessionRecords: the burst's records through session.handle;
// one op is one record.
func BenchmarkSessionRecords(b *testing.B) {
	for _, c := range burstConfigs {
		b.Run(c.name, func(b *testing.B) {
			s, st := burstSession(b, c.make(io.Discard))
			rounds := (b.N + len(st.loop) - 1) / len(st.loop)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for range rounds {
				st.play(s, st.loop)
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			n := float64(rounds * len(st.loop))
			b.ReportMetric(b.Elapsed().Seconds()*1e9/n, "ns/record")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/n, "allocs/record")
			b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/n, "B/record")
			b.ReportMetric(float64(after.NumGC-before.NumGC), "GCs")
		})
	}
}
