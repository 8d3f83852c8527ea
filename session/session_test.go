package session

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/probes"
	"github.com/tttrace/tttrace/probes/tables"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/sinks"
)

// The runtime driven without BPF: a fake backend plays a script of ring
// records and process changes; a fake host plays /proc and the processes.

// step is a ring record, or a change of the world that happens when the
// reader gets there (a library mapped, a process ended).
type step struct {
	rec    *events.Wire
	raw    []byte // a record other than an event (a stack record)
	action func()
	idle   bool // Read finds the ring empty once (the runtime reaps ends then)
}

type fakeBackend struct {
	mu        sync.Mutex
	script    []step
	wake      chan struct{}
	attach    map[string]error // TT-Metal libraries and what attaching them gives
	gone      map[string]int   // how many more times a path does not resolve
	libs      int
	pids      map[uint32]bool
	lost      uint64
	lostKinds [64]uint64
	dlTotal   uint64            // _dl_debug_state calls dropped in all
	dlPids    map[uint32]uint64 // and by process, not yet taken
	buf       bytes.Buffer
	loaders   []string
}

func newFakeBackend(script ...step) *fakeBackend {
	return &fakeBackend{script: script, wake: make(chan struct{}, 1), attach: map[string]error{}, pids: map[uint32]bool{}}
}

func (b *fakeBackend) ProcessEvents() error { return nil }
func (b *fakeBackend) Loader(p string, _ int) error {
	b.loaders = append(b.loaders, p)
	return nil
}
func (b *fakeBackend) Library(path string, recognise bool) (Verdict, error) {
	if b.gone[path] > 0 {
		b.gone[path]--
		return LibGone, nil
	}
	err, tt := b.attach[path]
	switch {
	case !tt && recognise:
		return LibOther, nil
	case !tt:
		return LibRefused, errorf(ErrNoLibrary, "library: %s: not an ELF file", path)
	case err != nil:
		return LibRefused, err
	}
	b.libs++
	return LibAttached, nil
}
func (b *fakeBackend) Libraries() int { return b.libs }
func (b *fakeBackend) Probes() int    { return 12 * b.libs }
func (b *fakeBackend) AddPID(pid uint32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pids[pid] = true
	return nil
}
func (b *fakeBackend) SetPython(uint32, []byte) error { return nil }
func (b *fakeBackend) ClearPython(uint32)             {}
func (b *fakeBackend) AttachCodeDealloc(*os.File, uint64) error {
	return nil
}
func (b *fakeBackend) LearnStack(uint32, uint64, []tables.StackStep, []uint64, uint64) error {
	return nil
}
func (b *fakeBackend) ForgetStacks(uint32) {}
func (b *fakeBackend) LearnPyStack(uint32, uint32, uint64, []tables.PyKeyFrame, uint64) error {
	return nil
}
func (b *fakeBackend) ForgetPyStacks(uint32) {}

func (b *fakeBackend) RemovePID(pid uint32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.pids, pid)
	return nil
}
func (b *fakeBackend) Wake() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}
func (b *fakeBackend) Lost() (probes.Losses, error) {
	return probes.Losses{Events: b.lost, ByKind: b.lostKinds}, nil
}
func (b *fakeBackend) LoaderDrops() (uint64, map[uint32]uint64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	taken := b.dlPids
	b.dlPids = nil
	return b.dlTotal, taken, nil
}

// dropLinkMap is a _dl_debug_state call of pid over its budget: BPF counts
// it and writes no record. named: BPF had room to name the process.
func (b *fakeBackend) dropLinkMap(pid uint32, named bool) func() {
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.dlTotal++
		if named {
			if b.dlPids == nil {
				b.dlPids = map[uint32]uint64{}
			}
			b.dlPids[pid]++
		}
	}
}

func (b *fakeBackend) Traced(pid uint32) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.pids[pid]
}
func (b *fakeBackend) Detach() error { return nil }
func (b *fakeBackend) Close() error  { return nil }

func (b *fakeBackend) Read(deadline time.Time) ([]byte, bool, error) {
	for {
		b.mu.Lock()
		if len(b.script) == 0 {
			b.mu.Unlock()
			break
		}
		st := b.script[0]
		b.script = b.script[1:]
		b.mu.Unlock()
		if st.action != nil {
			st.action()
			continue
		}
		if st.idle {
			return nil, false, nil
		}
		if st.raw != nil {
			return st.raw, true, nil
		}
		// What the BPF fork and exit hooks do to the pid filter.
		b.mu.Lock()
		switch st.rec.Hdr.Kind {
		case events.KindFork:
			b.pids[st.rec.Hdr.Pid] = true
		case events.KindGroupExit:
			delete(b.pids, st.rec.Hdr.Pid)
		}
		b.mu.Unlock()
		b.buf.Reset()
		if err := binary.Write(&b.buf, binary.LittleEndian, st.rec); err != nil {
			return nil, false, err
		}
		return b.buf.Bytes(), true, nil
	}
	d := time.Until(deadline)
	if d <= 0 {
		return nil, false, nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-b.wake:
	}
	return nil, false, nil
}

type fakeProc struct {
	objs    []string
	info    devices.ProcessInfo
	ended   chan struct{}
	code    int
	signal  int
	started bool
}

type fakeHost struct {
	mu       sync.Mutex
	procs    map[int]*fakeProc
	startErr error
	child    int // the pid Start gives
}

func newFakeHost() *fakeHost { return &fakeHost{procs: map[int]*fakeProc{}} }

func (h *fakeHost) proc(pid int) *fakeProc {
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.procs[pid]
	if p == nil {
		p = &fakeProc{ended: make(chan struct{}), info: devices.ProcessInfo{Command: fmt.Sprintf("prog%d", pid)}}
		h.procs[pid] = p
	}
	return p
}

// end makes pid exit with code (or signal).
func (h *fakeHost) end(pid, code, signal int) func() {
	return func() {
		p := h.proc(pid)
		p.code, p.signal = code, signal
		close(p.ended)
	}
}

// load maps lib into pid.
func (h *fakeHost) load(pid int, lib string) func() {
	return func() {
		p := h.proc(pid)
		h.mu.Lock()
		p.objs = append(p.objs, lib)
		h.mu.Unlock()
	}
}

func (h *fakeHost) Exists(pid int) error { return nil }
func (h *fakeHost) Objects(pid int) ([]string, string, error) {
	p := h.proc(pid)
	h.mu.Lock()
	defer h.mu.Unlock()
	select {
	case <-p.ended:
		return nil, "", errors.New("no such process")
	default:
	}
	return append([]string(nil), p.objs...), "/lib64/ld-linux-x86-64.so.2", nil
}
func (h *fakeHost) Info(pid int) devices.ProcessInfo  { return h.proc(pid).info }
func (h *fakeHost) Candidates(int, []string) []string { return nil }
func (h *fakeHost) AllPids() []int                    { return nil }
func (h *fakeHost) Key(path string) (procfs.FileKey, error) {
	var k uint64
	for _, c := range path {
		k = k*31 + uint64(c)
	}
	return procfs.FileKey{Dev: 1, Ino: k}, nil
}
func (h *fakeHost) WaitExit(pid int) { <-h.proc(pid).ended }
func (h *fakeHost) Self() int        { return 1 }
func (h *fakeHost) Start(command []string) (Child, error) {
	if h.startErr != nil {
		return nil, h.startErr
	}
	return &fakeChild{h: h, pid: h.child}, nil
}

type fakeChild struct {
	h        *fakeHost
	pid      int
	released bool
}

func (c *fakeChild) Pid() int { return c.pid }
func (c *fakeChild) Release() error {
	c.released = true
	return nil
}
func (c *fakeChild) Wait() (int, int) {
	p := c.h.proc(c.pid)
	<-p.ended
	return p.code, p.signal
}
func (c *fakeChild) Abandon() {}

// recorder is a sink that keeps what it is given.
type recorder struct {
	sinks.Base
	kinds   []string
	ended   []uint32
	more    []bool
	summary *devices.Summary
	chips   map[[2]int64]devices.Totals
}

func (r *recorder) Event(ev *events.Event) {
	r.kinds = append(r.kinds, fmt.Sprintf("%s:%d", ev.Kind, ev.Pid))
}
func (r *recorder) ProcessEnded(one *devices.Summary, more bool) {
	r.ended = append(r.ended, one.Processes[0].Pid)
	r.more = append(r.more, more)
}
func (r *recorder) Summary(s *devices.Summary) error {
	r.summary = s
	return nil
}
func (r *recorder) ChipTotals(pid uint32, chip int32, _ uint64, t *devices.Totals) {
	if r.chips == nil {
		r.chips = map[[2]int64]devices.Totals{}
	}
	r.chips[[2]int64{int64(pid), int64(chip)}] = *t
}

var seq uint64

func rec(w events.Wire) step {
	seq++
	w.Hdr.Seq = seq
	w.Hdr.TsNs = seq * 1000
	if w.Hdr.Tid == 0 {
		w.Hdr.Tid = w.Hdr.Pid
	}
	return step{rec: &w}
}

// cbAlloc is a circular buffer of size bytes per core at addr on chip: a
// struct cb_alloc_record whose core ranges the layout did not give.
func cbAlloc(pid uint32, chip int32, addr, size uint64) step {
	seq++
	w := events.CBAllocWire{Hdr: events.Header{Seq: seq, TsNs: seq * 1000, Pid: pid, Tid: pid, Kind: events.KindCBAlloc},
		Device: 0x7f0000 + uint64(chip), DeviceKind: events.DeviceChip, Chip: chip, Address: addr, Size: size}
	return step{raw: rawRecord(&w, 0)}
}

func alloc(pid uint32, buf uint64, chip int32, t events.BufferType, addr, size uint64) step {
	return rec(events.Wire{Hdr: events.Header{Kind: events.KindAlloc, Pid: pid}, Object: buf, Device: 0x7f0000 + uint64(chip), DeviceKind: events.DeviceChip,
		Chip: chip, BufferType: int32(t), Address: addr, Size: size, OwnsData: 1, Status: 1})
}

func free(pid uint32, buf uint64, chip int32) step {
	return rec(events.Wire{Hdr: events.Header{Kind: events.KindFree, Pid: pid}, Object: buf, Device: 0x7f0000 + uint64(chip), DeviceKind: events.DeviceChip,
		Chip: chip, BufferType: -1, OwnsData: 1, Status: 1})
}

func linkMap(pid uint32) step {
	return rec(events.Wire{Hdr: events.Header{Kind: events.KindLinkMap, Pid: pid}, Chip: -1})
}

func groupExit(pid uint32) step {
	return rec(events.Wire{Hdr: events.Header{Kind: events.KindGroupExit, Pid: pid}, Chip: -1})
}

func fork(parent, child uint32) step {
	return rec(events.Wire{Hdr: events.Header{Kind: events.KindFork, Pid: child}, ParentPid: parent, Chip: -1})
}

func do(f func()) step { return step{action: f} }

// idle: the ring is empty for one read.
var idle = step{idle: true}

func device(t *testing.T, s *devices.Summary, pid uint32, chip int32) devices.DeviceSummary {
	t.Helper()
	for _, p := range s.Processes {
		if p.Pid != pid {
			continue
		}
		for _, d := range p.Devices {
			if d.Device == chip {
				return d
			}
		}
	}
	t.Fatalf("pid %d chip %d not in the summary", pid, chip)
	return devices.DeviceSummary{}
}

// -- CMD: records reach the ledger, the sinks and the observer in order;
// the command's exit status comes back; the summary is exact.
func TestRunCommand(t *testing.T) {
	h := newFakeHost()
	h.child = 100
	be := newFakeBackend(
		alloc(100, 0xb1, 0, events.DRAM, 0x20000, 4096),
		alloc(100, 0xb2, 1, events.L1, 0x20000, 512),
		alloc(100, 0xb3, 64, events.Trace, 0x0, 1<<20),
		free(100, 0xb1, 0),
		do(h.end(100, 3, 0)),
	)
	be.attach["/opt/tt/libtt_metal.so"] = nil
	r := &recorder{}
	var nd bytes.Buffer
	cfg := Config{Command: []string{"workload", "--x"}, Lib: "/opt/tt/libtt_metal.so", Follow: true}
	res, err := run(context.Background(), cfg, be, h, []sinks.Sink{r, sinks.NewNDJSON(&nd, false)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Command == nil || *res.Command != (ExitStatus{Code: 3}) || res.Interrupted || res.NoLibrary {
		t.Fatalf("result %+v (command %+v)", res, res.Command)
	}
	want := []string{"alloc:100", "alloc:100", "alloc:100", "free:100", "exit:100"}
	if strings.Join(r.kinds, " ") != strings.Join(want, " ") {
		t.Errorf("events %v, want %v", r.kinds, want)
	}
	if len(r.ended) != 1 || r.ended[0] != 100 || r.more[0] {
		t.Errorf("process ends %v (more %v), want [100] without more", r.ended, r.more)
	}
	s := r.summary
	if d := device(t, s, 100, 0); d.DRAMBytes != 0 || d.Peaks.DRAMBytes.Value != 4096 || d.LiveBuffers != 0 {
		t.Errorf("chip 0: %+v", d)
	}
	if d := device(t, s, 100, 1); d.L1Bytes != 512 || d.LiveBuffers != 1 {
		t.Errorf("chip 1: %+v", d)
	}
	if d := device(t, s, 100, 64); d.TraceBytes != 1<<20 {
		t.Errorf("chip 64: %+v", d)
	}
	p := s.Processes[0]
	if p.Command != "workload --x" || p.Parent != 1 || !p.Exited || p.ExitCode != 3 || p.LeakCount() != 2 {
		t.Errorf("process %+v", p)
	}
	if got := r.chips[[2]int64{100, 0}]; got != (devices.Totals{}) {
		t.Errorf("observer: chip 0 ends at %v", got)
	}
	if got := r.chips[[2]int64{100, 1}]; got[devices.CounterL1] != 512 || got[devices.CounterLiveBuffers] != 1 {
		t.Errorf("observer: chip 1 ends at %v", got)
	}
	// The NDJSON sink: the run line, one line per event, then the
	// summary, which decodes to what the recorder was given.
	lines := strings.Split(strings.TrimSpace(nd.String()), "\n")
	if len(lines) != len(want)+2 || !strings.HasPrefix(lines[0], `{"type":"run",`) {
		t.Fatalf("%d NDJSON lines:\n%s", len(lines), nd.String())
	}
	var got devices.Summary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatal(err)
	}
	if got.Type != "summary" || len(got.Processes) != 1 || got.Processes[0].Devices[1].L1Bytes != 512 {
		t.Errorf("NDJSON summary %s", lines[len(lines)-1])
	}
}

// -p PID that loads TT-Metal after tttrace attached: found through the
// link map; a second process that never loads it is reported, and the
// first to end gets its own report while the other goes on.
func TestRunAttachLoadsLater(t *testing.T) {
	h := newFakeHost()
	be := newFakeBackend(
		do(h.load(200, "/venv/ttnn/libtt_metal.so")),
		linkMap(200),
		alloc(200, 0xa1, 3, events.L1Small, 0x1000, 64),
		do(h.end(201, 0, 0)),
		do(func() { time.Sleep(50 * time.Millisecond) }), // the end of 201 is reaped first
		alloc(200, 0xa2, 3, events.L1Small, 0x2000, 64),
		do(h.end(200, 0, 9)),
	)
	be.attach["/venv/ttnn/libtt_metal.so"] = nil
	r := &recorder{}
	var log bytes.Buffer
	res, err := run(context.Background(), Config{PIDs: []int{200, 201}, Log: &log}, be, h, []sinks.Sink{r})
	if err != nil {
		t.Fatal(err)
	}
	if res.NoLibrary || res.Command != nil {
		t.Fatalf("result %+v", res)
	}
	if len(r.ended) != 2 || r.ended[0] != 201 || !r.more[0] || r.ended[1] != 200 || r.more[1] {
		t.Errorf("ends %v more %v", r.ended, r.more)
	}
	if d := device(t, r.summary, 200, 3); d.L1SmallBytes != 128 || d.LiveBuffers != 2 {
		t.Errorf("chip 3: %+v", d)
	}
	if !strings.Contains(log.String(), "pid 200 has not loaded libtt_metal.so yet") {
		t.Errorf("log:\n%s", log.String())
	}
	if len(be.pids) != 0 {
		t.Errorf("pids still in the filter: %v", be.pids)
	}
}

// A process's _dl_debug_state calls over its budget leave no record: a
// library mapped before one of them is still found, at the next look at
// the drop counters, whether BPF could name the process or not; the
// summary counts the drops.
func TestRunLoaderCallsDropped(t *testing.T) {
	for _, named := range []bool{true, false} {
		t.Run(fmt.Sprintf("named=%v", named), func(t *testing.T) {
			h := newFakeHost()
			be := newFakeBackend()
			be.script = []step{
				linkMap(300), // within the budget: nothing mapped yet
				do(h.load(300, "/venv/ttnn/libtt_metal.so")),
				do(be.dropLinkMap(300, named)),
				do(be.dropLinkMap(300, named)),
				{idle: true},
				do(func() { time.Sleep(3 * tick) }), // ticks without a record
				do(h.end(300, 0, 0)),
			}
			be.attach["/venv/ttnn/libtt_metal.so"] = nil
			var log bytes.Buffer
			res, err := run(context.Background(), Config{PIDs: []int{300}, Log: &log}, be, h, nil)
			if err != nil {
				t.Fatal(err)
			}
			if be.libs != 1 || res.NoLibrary {
				t.Errorf("library attached %d times, NoLibrary %v: the load behind the dropped calls was missed\n%s", be.libs, res.NoLibrary, log.String())
			}
			if res.Summary.LoaderCallsDropped != 2 {
				t.Errorf("summary: %d calls dropped, want 2", res.Summary.LoaderCallsDropped)
			}
			if named {
				p := res.Summary.Processes
				if len(p) != 1 || p[0].LoaderCallsDropped != 2 {
					t.Errorf("processes %+v: want pid 300 with 2 calls dropped", p)
				}
				if !strings.Contains(log.String(), "pid 300 calls the dynamic loader's _dl_debug_state faster than its budget") {
					t.Errorf("log:\n%s", log.String())
				}
			}
		})
	}
}

// -p PID that never loads TT-Metal: NoLibrary; with Wait, an ErrNoLibrary.
func TestRunNoLibrary(t *testing.T) {
	h := newFakeHost()
	be := newFakeBackend(do(h.end(300, 0, 0)))
	res, err := run(context.Background(), Config{PIDs: []int{300}}, be, h, nil)
	if err != nil || !res.NoLibrary {
		t.Fatalf("res %+v err %v", res, err)
	}
	h = newFakeHost()
	be = newFakeBackend()
	_, err = run(context.Background(), Config{PIDs: []int{301}, Wait: 50 * time.Millisecond}, be, h, nil)
	if KindOf(err) != ErrNoLibrary || !strings.Contains(fmt.Sprint(err), "pid 301 did not load libtt_metal.so within --wait 50ms") {
		t.Fatalf("err %v (kind %v)", err, KindOf(err))
	}
}

// Forked children: one that uses TT-Metal joins the report under its own
// command; one that never does stays out of it.
func TestRunFollow(t *testing.T) {
	h := newFakeHost()
	h.child = 400
	h.proc(401).info.Command = "python -m pytest"
	be := newFakeBackend(
		fork(400, 401),
		fork(400, 402),
		do(func() { time.Sleep(3 * tick / 2) }), // the children stay while nothing happens
		alloc(401, 0xc1, 0, events.DRAM, 0x40000, 2048),
		do(h.end(402, 0, 0)), groupExit(402),
		do(h.end(401, 1, 0)), groupExit(401),
		do(h.end(400, 1, 0)), groupExit(400),
	)
	be.attach["/lib/libtt_metal.so"] = nil
	r := &recorder{}
	var log bytes.Buffer
	res, err := run(context.Background(), Config{Command: []string{"sh"}, Follow: true, Lib: "/lib/libtt_metal.so", Log: &log}, be, h, []sinks.Sink{r})
	if err != nil {
		t.Fatal(err)
	}
	if *res.Command != (ExitStatus{Code: 1}) {
		t.Errorf("command %+v", res.Command)
	}
	var pids []uint32
	for _, p := range r.summary.Processes {
		pids = append(pids, p.Pid)
		if p.Pid == 401 && (p.Command != "python -m pytest" || p.Parent != 400) {
			t.Errorf("child %+v", p)
		}
	}
	if fmt.Sprint(pids) != "[400 401]" {
		t.Errorf("processes %v, want [400 401]", pids)
	}
	if !strings.Contains(log.String(), "1 followed process(es) ended without using TT-Metal") {
		t.Errorf("log:\n%s", log.String())
	}
}

// Losses only the kernel's counters know of become a lost record, and the
// summary says the ledger is incomplete; a bad record is skipped and said.
func TestRunLostAndBadRecords(t *testing.T) {
	h := newFakeHost()
	h.child = 500
	bad := rec(events.Wire{Hdr: events.Header{Kind: events.KindLost, Pid: 500}}) // synthesized kinds never come from the ring
	be := newFakeBackend(alloc(500, 0xd1, 0, events.DRAM, 0, 64), bad, do(h.end(500, 0, 0)))
	be.attach["/l.so"] = nil
	be.lost = 7
	r := &recorder{}
	var log bytes.Buffer
	res, err := run(context.Background(), Config{Command: []string{"x"}, Lib: "/l.so", Log: &log}, be, h, []sinks.Sink{r})
	if err != nil {
		t.Fatal(err)
	}
	if res.Summary.LostEvents != 7 || res.Summary.Complete {
		t.Errorf("summary lost %d complete %v", res.Summary.LostEvents, res.Summary.Complete)
	}
	if last := r.kinds[len(r.kinds)-1]; last != "lost:0" {
		t.Errorf("last event %s, want lost", last)
	}
	if !strings.Contains(log.String(), "bad record: record seq") {
		t.Errorf("log:\n%s", log.String())
	}
}

// The kernel's per-kind loss counters reach the summary by kind name.
func TestRunLostByKind(t *testing.T) {
	h := newFakeHost()
	h.child = 500
	be := newFakeBackend(alloc(500, 0xd1, 0, events.DRAM, 0, 64), do(h.end(500, 0, 0)))
	be.attach["/l.so"] = nil
	be.lost = 5
	be.lostKinds[events.KindAlloc], be.lostKinds[events.KindFree] = 3, 2
	be.lostKinds[events.KindStack], be.lostKinds[events.KindPyCode] = 9, 1
	res, err := run(context.Background(), Config{Command: []string{"x"}, Lib: "/l.so", Log: io.Discard}, be, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"alloc": 3, "free": 2, "stack": 9, "py_code": 1}
	if !reflect.DeepEqual(res.Summary.LostRecords, want) || res.Summary.LostEvents != 5 {
		t.Errorf("lost_records %v lost_events %d, want %v and 5", res.Summary.LostRecords, res.Summary.LostEvents, want)
	}
}

// Errors carry their kind: a command not found, a --lib that is not
// TT-Metal; ctx ends tracing under All.
func TestRunErrorsAndInterrupt(t *testing.T) {
	h := newFakeHost()
	h.startErr = errorf(ErrNotFound, "nosuch: command not found")
	_, err := run(context.Background(), Config{Command: []string{"nosuch"}}, newFakeBackend(), h, nil)
	if KindOf(err) != ErrNotFound {
		t.Errorf("start: %v (%v)", err, KindOf(err))
	}
	_, err = run(context.Background(), Config{Command: []string{"x"}, Lib: "/not/tt.so"}, newFakeBackend(), newFakeHost(), nil)
	if KindOf(err) != ErrNoLibrary {
		t.Errorf("--lib: %v (%v)", err, KindOf(err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	r := &recorder{}
	res, err := run(ctx, Config{All: true}, newFakeBackend(), newFakeHost(), []sinks.Sink{r})
	if err != nil || !res.Interrupted || r.summary == nil {
		t.Errorf("--all: res %+v err %v", res, err)
	}
}

// --all: the first process to map a library ended before tttrace could
// open it through /proc/PID/root. That says nothing of the file: the next
// process mapping it gets it probed and traced.
func TestRunAllLibraryOfEndedProcess(t *testing.T) {
	h := newFakeHost()
	lib := "/opt/tt/libtt_metal.so"
	be := newFakeBackend(
		do(h.load(800, lib)),
		linkMap(800),
		do(h.load(801, lib)),
		linkMap(801),
		alloc(801, 0xb1, 5, events.DRAM, 0x100, 2048),
		do(h.end(801, 0, 0)),
	)
	be.attach[lib] = nil
	be.gone = map[string]int{lib: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	r := &recorder{}
	if _, err := run(ctx, Config{All: true}, be, h, []sinks.Sink{r}); err != nil {
		t.Fatal(err)
	}
	if be.libs != 1 {
		t.Errorf("%d libraries probed, want the one the second process mapped", be.libs)
	}
	if d := device(t, r.summary, 801, 5); d.DRAMBytes != 2048 || d.LiveBuffers != 1 {
		t.Errorf("chip 5: %+v", d)
	}
}

// A consumer that fell behind: the process loaded the library, ran and
// ended before its records were read, so /proc knows nothing of it any
// more. Its records alone say it used TT-Metal, and the ledger is whole.
func TestRunRecordsOutliveTheProcess(t *testing.T) {
	h := newFakeHost()
	be := newFakeBackend(
		do(h.end(600, 0, 0)),
		linkMap(600),
		alloc(600, 0xe1, 2, events.DRAM, 0x100, 4096),
		alloc(600, 0xe2, 2, events.DRAM, 0x2000, 4096),
		free(600, 0xe1, 2),
	)
	be.attach["/tt/libtt_metal.so"] = nil
	r := &recorder{}
	res, err := run(context.Background(), Config{PIDs: []int{600}, Lib: "/tt/libtt_metal.so"}, be, h, []sinks.Sink{r})
	if err != nil {
		t.Fatal(err)
	}
	if res.NoLibrary {
		t.Error("NoLibrary for a process whose records show TT-Metal calls")
	}
	if d := device(t, r.summary, 600, 2); d.DRAMBytes != 4096 || d.LiveBuffers != 1 || d.Peaks.DRAMBytes.Value != 8192 {
		t.Errorf("chip 2: %+v", d)
	}
}

// A forked child's end comes from the kernel, not from a pidfd opened when
// its fork record is read: there the pid may already name another process
// (here one that never ends). Its group-exit record ends it; and when that
// record is lost, the pid's absence from the BPF filter does.
func TestRunForkedChildEnds(t *testing.T) {
	for _, lost := range []bool{false, true} {
		h := newFakeHost()
		h.child = 700
		be := newFakeBackend(fork(700, 701), alloc(701, 0xf1, 0, events.L1, 0x80, 256))
		if lost {
			be.script = append(be.script, do(func() {
				be.mu.Lock()
				delete(be.pids, 701) // the exit hook ran; its record did not fit in the ring
				be.mu.Unlock()
			}))
		} else {
			be.script = append(be.script, groupExit(701))
		}
		be.script = append(be.script, do(func() { time.Sleep(3 * tick) }), do(h.end(700, 0, 0)), groupExit(700))
		be.attach["/tt.so"] = nil
		// 701 is never ended in the host: a pid watcher would wait forever.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		r := &recorder{}
		res, err := run(ctx, Config{Command: []string{"x"}, Follow: true, Lib: "/tt.so"}, be, h, []sinks.Sink{r})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if res.Interrupted {
			t.Fatalf("lost=%v: tracing did not end by itself", lost)
		}
		if len(r.ended) != 2 || r.ended[0] != 701 || !r.more[0] {
			t.Errorf("lost=%v: ends %v more %v, want 701 first while 700 goes on", lost, r.ended, r.more)
		}
		if d := device(t, r.summary, 701, 0); d.L1Bytes != 256 {
			t.Errorf("lost=%v: child chip 0 %+v", lost, d)
		}
	}
}

// noticeRecorder is a sink that keeps the ledger's notices.
type noticeRecorder struct {
	sinks.Base
	notes []string
}

func (r *noticeRecorder) Notice(n *devices.Notice) {
	r.notes = append(r.notes, fmt.Sprintf("%s:%d:%d", n.Type, n.Chip, n.Headroom))
}

// The ledger's notices reach NoticeSinks and the NDJSON stream in order: an
// l1_headroom during the CB that lowers headroom under --l1-warn (before
// that CB's line), an l1_clash once the layout is over (here: the process
// ended right after, as when TT-Metal's throw ends it), and a note on the log.
func TestNoticesReachSinks(t *testing.T) {
	h := newFakeHost()
	h.child = 100
	be := newFakeBackend(
		alloc(100, 0xb1, 0, events.L1, 0x10000, 4096),
		alloc(100, 0xb2, 0, events.L1Small, 0x1000, 4096),
		rec(events.Wire{Hdr: events.Header{Kind: events.KindCBLayout, Pid: 100}, Object: 0x5600, Device: 0x7f0000, DeviceKind: events.DeviceChip, Chip: 0}),
		cbAlloc(100, 0, 0x1000, 0x10000),
		do(h.end(100, 134, 0)),
	)
	be.attach["/opt/tt/libtt_metal.so"] = nil
	nr := &noticeRecorder{}
	var nd, log bytes.Buffer
	cfg := Config{Command: []string{"workload"}, Lib: "/opt/tt/libtt_metal.so", L1Warn: 0x8000, Log: &log}
	res, err := run(context.Background(), cfg, be, h, []sinks.Sink{nr, sinks.NewNDJSON(&nd, false)})
	if err != nil {
		t.Fatal(err)
	}
	if want := "l1_headroom:0:-4096 l1_clash:0:-4096"; strings.Join(nr.notes, " ") != want {
		t.Errorf("notices %v, want %s", nr.notes, want)
	}
	var types []string
	for _, line := range strings.Split(strings.TrimSpace(nd.String()), "\n") {
		var head struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal([]byte(line), &head); err != nil {
			t.Fatalf("%v: %s", err, line)
		}
		types = append(types, head.Type)
	}
	if want := "run alloc alloc cb_layout l1_headroom cb_alloc l1_clash exit summary"; strings.Join(types, " ") != want {
		t.Errorf("NDJSON types %v, want %s", types, want)
	}
	if !strings.Contains(log.String(), "tttrace: pid 100 chip 0: circular buffers of program 0x5600 end at 69632, above the L1 buffer at 65536") {
		t.Errorf("no clash note on the log:\n%s", log.String())
	}
	p := res.Summary.Processes[0]
	if len(p.L1Clashes) != 1 || p.L1Clashes[0].L1BuffersCount != 1 || p.L1Clashes[0].L1Buffers[0].Buffer != "0xb1" {
		t.Errorf("summary clashes %+v", p.L1Clashes)
	}
	d := device(t, &res.Summary, 100, 0)
	if d.MinL1Headroom == nil || d.MinL1Headroom.Value != -4096 {
		t.Errorf("min_l1_headroom %+v", d.MinL1Headroom)
	}
}

// endOnClash ends the traced command once it hears of an l1_clash.
type endOnClash struct {
	sinks.Base
	end   func()
	heard int
}

func (e *endOnClash) Notice(n *devices.Notice) {
	if n.Type == devices.NoticeL1Clash {
		e.heard++
		if e.heard == 1 {
			e.end()
		}
	}
}

// A clash is reported within a tick or so even when the program makes no
// further TT-Metal call on that thread: the runtime settles quiet layouts
// when the ring is idle. Here the command only ends once the clash is out.
func TestQuietLayoutIsChecked(t *testing.T) {
	h := newFakeHost()
	h.child = 100
	be := newFakeBackend(
		alloc(100, 0xb1, 0, events.L1, 0x10000, 4096),
		rec(events.Wire{Hdr: events.Header{Kind: events.KindCBLayout, Pid: 100}, Object: 0x5600, Device: 0x7f0000, DeviceKind: events.DeviceChip, Chip: 0}),
		cbAlloc(100, 0, 0x1000, 0x10000),
	)
	be.attach["/opt/tt/libtt_metal.so"] = nil
	k := &endOnClash{end: h.end(100, 0, 0)}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := run(ctx, Config{Command: []string{"workload"}, Lib: "/opt/tt/libtt_metal.so"}, be, h, []sinks.Sink{k})
	if err != nil {
		t.Fatal(err)
	}
	if res.Interrupted || k.heard != 1 {
		t.Fatalf("interrupted %v, %d clashes heard: a quiet layout was never checked", res.Interrupted, k.heard)
	}
}

// lateBackend is a fakeBackend whose probes can be handed to a closer: it
// notes when each way of detaching happens, against the summary.
type lateBackend struct {
	*fakeBackend
	r   *recorder
	log []string
}

func (b *lateBackend) note(what string) {
	if b.r.summary != nil {
		what += " after the summary"
	}
	b.log = append(b.log, what)
}
func (b *lateBackend) Detach() error { b.note("detach"); return nil }
func (b *lateBackend) TracesNone() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.pids) == 0
}
func (b *lateBackend) DetachLater(start func([]*os.File) (func(), error)) error {
	b.note("handed to a closer")
	return nil
}

// TestRunDetachLate: a run whose processes all ended hands its probes to a
// closer once the summary is written, without detaching first; a run
// interrupted while a process is traced, or tracing every process,
// detaches before the drain (a drain would chase the producer).
func TestRunDetachLate(t *testing.T) {
	h := newFakeHost()
	h.child = 100
	r := &recorder{}
	be := &lateBackend{fakeBackend: newFakeBackend(alloc(100, 0xb1, 0, events.DRAM, 0x20000, 4096), do(h.end(100, 0, 0))), r: r}
	be.attach["/opt/tt/libtt_metal.so"] = nil
	cfg := Config{Command: []string{"workload"}, Lib: "/opt/tt/libtt_metal.so"}
	if _, err := run(context.Background(), cfg, be, h, []sinks.Sink{r}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"handed to a closer after the summary"}; !slices.Equal(be.log, want) {
		t.Errorf("command ended: %q, want %q", be.log, want)
	}

	for _, all := range []bool{false, true} {
		h := newFakeHost()
		r := &recorder{}
		be := &lateBackend{fakeBackend: newFakeBackend(alloc(100, 0xb1, 0, events.DRAM, 0x20000, 4096)), r: r}
		be.attach["/opt/tt/libtt_metal.so"] = nil
		cfg := Config{PIDs: []int{100}, Lib: "/opt/tt/libtt_metal.so", All: all}
		if all {
			cfg.PIDs = nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
		res, err := run(ctx, cfg, be, h, []sinks.Sink{r})
		cancel()
		if err != nil || !res.Interrupted {
			t.Fatalf("all=%v: res %+v, err %v", all, res, err)
		}
		if want := []string{"detach"}; !slices.Equal(be.log, want) {
			t.Errorf("interrupted (all=%v): %q, want %q", all, be.log, want)
		}
	}
}
