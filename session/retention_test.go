package session

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/probes/tables"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/sinks"
)

// --all meets one pid in three successive processes, each leaking one
// buffer allocated at a known site: with one ended process kept in full and
// one as totals, the first is summed in dropped_processes, the second is
// trimmed but keeps its leak site, and the third is whole; each trimmed
// process's stack table is matched to its own incarnation.
func TestRunRetention(t *testing.T) {
	pid := uint32(os.Getpid()) // a live process: its maps are real
	ip := uint64(reflect.ValueOf(TestRunRetention).Pointer())
	h := newFakeHost()
	var script []step
	for i := range uint64(3) {
		a := alloc(pid, 0xb0+i, 0, events.DRAM, 0x1000*(i+1), 4096*(i+1))
		a.rec.Hdr.Seq = 100 + i
		a.rec.Stack = events.StackFollows
		// Two idle reads: one ends the loop's read, one the drain before the reap.
		script = append(script, a, stackRec(a.rec.Hdr.Seq, pid, ip), groupExit(pid), step{idle: true}, step{idle: true})
	}
	be := newFakeBackend(script...)
	r := &recorder{}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	cfg := Config{All: true, KeepEnded: 1, KeepEndedTotals: 1}
	if _, err := run(ctx, cfg, be, h, []sinks.Sink{r}); err != nil {
		t.Fatal(err)
	}
	s := r.summary
	if d := s.DroppedProcesses; d == nil || d.Processes != 1 || d.Leaks != 1 || d.LeakedBytes != 4096 {
		t.Errorf("dropped %+v, want the first process and its 4096-byte leak", d)
	}
	if len(s.Processes) != 2 {
		t.Fatalf("%d processes, want 2", len(s.Processes))
	}
	trimmed, full := s.Processes[0], s.Processes[1]
	if trimmed.Trimmed == nil || trimmed.Trimmed.Leaks != 1 || len(trimmed.Leaks) != 0 || trimmed.LeakGroups[0].Bytes != 8192 {
		t.Errorf("second process: trimmed %+v, leaks %d, groups %+v", trimmed.Trimmed, len(trimmed.Leaks), trimmed.LeakGroups)
	}
	if len(trimmed.LeakSites) != 1 || trimmed.LeakSites[0].Bytes != 8192 {
		t.Errorf("second process: leak sites %+v, want its one site of 8192 bytes", trimmed.LeakSites)
	}
	if full.Trimmed != nil || full.LeakCount() != 1 || len(full.LeakSites) != 1 || full.LeakSites[0].Bytes != 12288 || len(full.Sites) != 1 {
		t.Errorf("third process: trimmed %+v, %d leaks, leak sites %+v, %d sites", full.Trimmed, full.LeakCount(), full.LeakSites, len(full.Sites))
	}
}

// learnBackend is the fake backend keeping the tokens stacks are made
// known under.
type learnBackend struct {
	*fakeBackend
	tokens []uint64
}

func (b *learnBackend) LearnStack(_ uint32, _ uint64, _ []tables.StackStep, _ []uint64, token uint64) error {
	b.tokens = append(b.tokens, token)
	return nil
}

// endedSites is a sink keeping each ended process's leak sites.
type endedSites struct {
	sinks.Base
	sites [][]devices.LeakSite
}

func (e *endedSites) ProcessEnded(one *devices.Summary, _ bool) {
	e.sites = append(e.sites, append([]devices.LeakSite(nil), one.Processes[0].LeakSites...))
}

// tokenStream makes the records of one pid whose native stack is fixed
// by its pcs (at ip), for a session.
type tokenStream struct {
	s   *session
	pid uint32
	ip  uint64
	seq uint64
}

func (ts *tokenStream) hdr(kind events.Kind) events.Header {
	if kind != events.KindStack {
		ts.seq++
	}
	return events.Header{Seq: ts.seq, TsNs: 1_000_000_000 + ts.seq*1000, Pid: ts.pid, Tid: ts.pid, Kind: kind}
}

// alloc handles an alloc of a DRAM buffer whose stack is copied
// (StackFollows, and its stack record), or named by token.
func (ts *tokenStream) alloc(obj, addr, size, token uint64) {
	w := events.Wire{Hdr: ts.hdr(events.KindAlloc), Object: obj, Device: 0x7f0000, DeviceKind: events.DeviceChip,
		BufferType: int32(events.DRAM), Address: addr, Size: size, OwnsData: 1, Status: 1, Stack: events.StackFollows}
	if token != 0 {
		w.Stack, w.StackToken = events.StackToken, token
	}
	ts.s.handle(rawRecord(&w, 0))
	if token == 0 {
		st := events.StackWire{Hdr: ts.hdr(events.KindStack), Ip: ts.ip, Sp: 0x7ffd0000, Size: 64}
		ts.s.handle(rawRecord(&st, 64))
	}
}

// record handles a record of kind with nothing more in it (an exit, a
// link-map change).
func (ts *tokenStream) record(kind events.Kind) {
	w := events.Wire{Hdr: ts.hdr(kind), Chip: -1}
	ts.s.handle(rawRecord(&w, 0))
}

// --all with known stacks meets one pid in many successive processes, each
// making its stack known and then naming it by its token: with
// --keep-ended 1 the stack state of every trimmed process goes with it
// (the tokens kept every ended process's stacks: 348 MB over 36
// processes, issue #32), and each process's token still names its own
// site.
func TestRunRetentionDropsKnownStacks(t *testing.T) {
	const procs = 8
	pid, ip := startOutermost(t) // a live process: its maps are real
	be := &learnBackend{fakeBackend: newFakeBackend()}
	out := &endedSites{}
	cfg := Config{All: true, KnownStacks: true, KeepEnded: 1, KeepEndedTotals: 4}
	s := newSession(cfg, be, newFakeHost(), []sinks.Sink{out}, nil)
	ts := &tokenStream{s: s, pid: pid, ip: ip}
	var held []weak.Pointer[procStacks]
	for i := range procs {
		ts.alloc(0xa0, 0x1000, 4096, 0)
		if len(be.tokens) != i+1 {
			t.Fatalf("process %d: %d stacks made known, want %d", i, len(be.tokens), i+1)
		}
		held = append(held, weak.Make(s.sites.procs[pid]))
		ts.alloc(0xb0, 0x2000, 8192, be.tokens[i])
		ts.record(events.KindGroupExit)
		s.reapExits()
	}
	for i, ls := range out.sites {
		if len(ls) != 1 || ls[0].Bytes != 4096+8192 {
			t.Errorf("process %d: leak sites %+v, want both buffers at its one site", i, ls)
		}
	}
	if a := s.sites; a.known != procs || a.staleKnown != 0 {
		t.Errorf("%d allocs named by their token, %d stale; want %d, 0", a.known, a.staleKnown, procs)
	}
	runtime.GC()
	alive := 0
	for _, w := range held {
		if w.Value() != nil {
			alive++
		}
	}
	runtime.KeepAlive(s) // the session goes on: what it holds is held
	// The last process is kept in full (its leaks are described from its
	// stacks); the others were trimmed.
	if alive > 1 {
		t.Errorf("the stack state of %d of %d ended processes is still held, want at most the one kept in full", alive, procs)
	}
}

// A stack made known again after its process's maps were read again (a
// library mapped: the kernel's entries of the process were forgotten)
// keeps its token, which still names it: the tokens a live process holds
// are bounded by its stacks, not by how often it maps a library.
func TestRunKnownStackKeepsItsToken(t *testing.T) {
	const rounds = 5
	pid, ip := startOutermost(t)
	be := &learnBackend{fakeBackend: newFakeBackend()}
	s := newSession(Config{All: true, KnownStacks: true}, be, newFakeHost(), nil, nil)
	ts := &tokenStream{s: s, pid: pid, ip: ip}
	for i := range rounds {
		ts.alloc(0xa0+uint64(i), 0x1000*uint64(i+1), 4096, 0)
		ts.record(events.KindLinkMap) // forgets the kernel's known stacks of pid
	}
	ts.alloc(0xf0, 0x100000, 4096, be.tokens[0]) // a token in the ring from before
	if len(be.tokens) != rounds {
		t.Fatalf("%d stacks made known, want %d", len(be.tokens), rounds)
	}
	for i, tok := range be.tokens {
		if tok != be.tokens[0] {
			t.Errorf("learn %d: token %d, want the stack's first, %d", i, tok, be.tokens[0])
		}
	}
	p := s.ledger.Summary().Processes[0]
	if a := s.sites; a.known != 1 || a.staleKnown != 0 || len(p.LeakSites) != 1 || p.LeakSites[0].Bytes != (rounds+1)*4096 {
		t.Errorf("%d allocs named by their token (%d stale), leak sites %+v; want every alloc at the one site", a.known, a.staleKnown, p.LeakSites)
	}
}

// startOutermost starts a sleep and returns its pid and the pc of its
// _start, whose CFI leaves the return address undefined (glibc's
// start.S): a stack taken there is fixed by its pcs, one frame, and is
// made known to the kernel. (The test binary's own frames end without
// such a rule: their stacks are never fixed.)
func startOutermost(t *testing.T) (uint32, uint64) {
	t.Helper()
	exe, err := exec.LookPath("sleep")
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var first uint64 // the vaddr of the segment at file offset 0
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Off == 0 {
			first = p.Vaddr
			break
		}
	}
	pid := cmd.Process.Pid
	for range 200 {
		maps, err := procfs.Maps(pid)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range maps {
			if m.Path == exe && m.Offset == 0 {
				return uint32(pid), m.Start - first + f.Entry
			}
		}
		time.Sleep(5 * time.Millisecond) // exec under way
	}
	t.Fatalf("%s is not mapped in pid %d", exe, pid)
	return 0, 0
}
