package devices

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"
	"weak"

	"github.com/tttrace/tttrace/events"
)

// endProc runs one short process pid that leaks n DRAM buffers of size on
// chip, makes one anomaly, and exits.
func endProc(l *Ledger, seq *uint64, pid uint32, n int, size uint64) {
	ap := func(e events.Event) {
		*seq++
		e.Pid, e.Seq, e.TsNs = pid, *seq, *seq
		l.Apply(&e)
	}
	for i := range n {
		ap(evAlloc(pid, uint64(0x10000+i*64), 0, events.DRAM, uint64(i)*size, size))
	}
	ap(evAlloc(pid, 0x1, 0, events.BufferType(9), 0, 1)) // invalid_buffer_type
	ap(evExit(0, 0))
}

// TestRetention: a service meeting 600 short leaking processes keeps the
// last keepEnded in full, the next keepTotals as totals (their leak groups,
// anomaly counts and stats exact, the lists counted in trimmed), and folds
// the rest into dropped_processes; memory no longer grows with them.
func TestRetention(t *testing.T) {
	const procs, leaks, size = 600, 2000, 4096
	l := NewLedger(Options{KeepEnded: 5, KeepEndedTotals: 50})
	var seq uint64
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	var base uint64
	var trimmed []TrimmedProcess
	for i := range procs {
		endProc(l, &seq, uint32(1000+i), leaks, size)
		trimmed = append(trimmed, l.Trim()...)
		if i == 99 {
			base = heap()
		}
	}
	if grew := int64(heap()) - int64(base); grew > 8<<20 {
		t.Errorf("the heap grew %d bytes over 500 more ended processes", grew)
	}
	if len(trimmed) != procs-5 || trimmed[0].Pid != 1000 || !trimmed[0].Current {
		t.Errorf("trimmed %d processes (first %+v), want %d from pid 1000", len(trimmed), trimmed[0], procs-5)
	}
	s := l.Summary()
	if len(s.Processes) != 55 {
		t.Fatalf("%d processes in the summary, want 5 + 50", len(s.Processes))
	}
	for i, p := range s.Processes {
		wantPid := uint32(1000 + procs - 55 + i)
		if p.Pid != wantPid {
			t.Errorf("process %d: pid %d, want %d", i, p.Pid, wantPid)
		}
		if len(p.LeakGroups) != 1 || p.LeakGroups[0].Count != leaks || p.LeakGroups[0].Bytes != leaks*size {
			t.Errorf("pid %d leak groups %+v", p.Pid, p.LeakGroups)
		}
		if p.AnomalyCounts["invalid_buffer_type"] != 1 || p.Stats.Allocs != leaks+1 {
			t.Errorf("pid %d: anomalies %v, allocs %d", p.Pid, p.AnomalyCounts["invalid_buffer_type"], p.Stats.Allocs)
		}
		full := i >= 50
		if full != (p.Trimmed == nil) || full != (len(p.Leaks) == leaks) {
			t.Errorf("pid %d: trimmed %+v with %d leaks listed; want full %v", p.Pid, p.Trimmed, len(p.Leaks), full)
		}
		if !full && (p.Trimmed.Leaks != leaks || p.Trimmed.Anomalies != 1) {
			t.Errorf("pid %d: trimmed %+v", p.Pid, *p.Trimmed)
		}
	}
	d := s.DroppedProcesses
	if d == nil || d.Processes != procs-55 || d.Leaks != (procs-55)*leaks || d.LeakedBytes != (procs-55)*leaks*size ||
		d.Anomalies != procs-55 || d.Events != (procs-55)*(leaks+2) {
		t.Errorf("dropped %+v", d)
	}
	if err := l.Check(); err != nil {
		t.Fatal(err)
	}
}

// A trimmed pid used again is a new process; a retired incarnation is
// trimmed before the current one of its pid.
func TestRetentionIncarnations(t *testing.T) {
	l := NewLedger(Options{KeepEnded: 1, KeepEndedTotals: 10})
	var seq uint64
	endProc(l, &seq, 7, 1, 64)
	l.NewIncarnation(7)
	endProc(l, &seq, 7, 2, 64)
	got := l.Trim()
	if len(got) != 1 || got[0] != (TrimmedProcess{Pid: 7, Current: false}) {
		t.Fatalf("trimmed %+v, want the retired incarnation of 7", got)
	}
	l.NewIncarnation(7)
	endProc(l, &seq, 7, 3, 64)
	got = l.Trim()
	if len(got) != 1 || got[0] != (TrimmedProcess{Pid: 7, Current: false}) {
		t.Fatalf("trimmed %+v", got)
	}
	s := l.Summary()
	var counts []uint64
	for _, p := range s.Processes {
		counts = append(counts, p.LeakGroups[0].Count)
	}
	if len(counts) != 3 || counts[0] != 1 || counts[1] != 2 || counts[2] != 3 || s.Processes[2].Trimmed != nil {
		t.Errorf("incarnations' leaks %v, want 1 2 3 in order, the last in full", counts)
	}
}

// nullSites is a site source that describes nothing.
type nullSites struct{ pad [64]byte }

func (*nullSites) Site(uint32) (Site, bool) { return Site{}, false }
func (*nullSites) Python() *PythonInfo      { return nil }

// TestRetentionLetsIncarnationsGo: one pid in successive processes, each
// a new incarnation: a trimmed one leaves nothing of it in the ledger,
// its site source (the runtime's stacks of it) included.
func TestRetentionLetsIncarnationsGo(t *testing.T) {
	const procs = 6
	l := NewLedger(Options{KeepEnded: 1, KeepEndedTotals: 1})
	var seq uint64
	var srcs []weak.Pointer[nullSites]
	for range procs {
		l.NewIncarnation(7)
		src := &nullSites{}
		srcs = append(srcs, weak.Make(src))
		l.SetSites(7, src)
		endProc(l, &seq, 7, 3, 64)
		l.Trim()
	}
	runtime.GC()
	alive := 0
	for _, w := range srcs {
		if w.Value() != nil {
			alive++
		}
	}
	runtime.KeepAlive(l)
	if alive != 1 {
		t.Errorf("%d of %d incarnations' site sources held, want the one kept in full", alive, procs)
	}
	if s := l.Summary(); len(s.Processes) != 2 || s.DroppedProcesses == nil || s.DroppedProcesses.Processes != procs-2 {
		t.Errorf("%d processes, dropped %+v", len(s.Processes), s.DroppedProcesses)
	}
}

// TestRetentionCutsCommand: a trimmed process keeps at most 4 KiB of its
// command line (one may be 4 MiB; 10,000 trimmed processes held 40 GB and
// made a summary line as large), cut at a character's start and marked,
// the bytes cut counted in trimmed.command_bytes; a short command line
// stays whole, and a process kept in full keeps all of its own.
func TestRetentionCutsCommand(t *testing.T) {
	const bound = 4096 // what --keep-ended-totals' help says
	// 1 MiB, with a 3-byte character across the cut.
	long := strings.Repeat("a", bound-1) + "€" + strings.Repeat("b", 1<<20)
	cmds := []string{long, "python -m pytest tests/", long}
	l := NewLedger(Options{KeepEnded: 1, KeepEndedTotals: 10})
	var seq uint64
	for i, c := range cmds {
		l.SetProcessInfo(uint32(100+i), ProcessInfo{Command: c})
		endProc(l, &seq, uint32(100+i), 1, 64)
		l.Trim()
	}
	s := l.Summary()
	b, err := json.Marshal(&s)
	if err != nil {
		t.Fatal(err)
	}
	var js struct {
		Processes []struct {
			Trimmed map[string]uint64 `json:"trimmed"`
		} `json:"processes"`
	}
	if err := json.Unmarshal(b, &js); err != nil || len(s.Processes) != 3 || len(js.Processes) != 3 {
		t.Fatalf("%d processes (%v)", len(s.Processes), err)
	}
	cut, short, full := s.Processes[0], s.Processes[1], s.Processes[2]
	kept := long[:bound-1]
	if cut.Trimmed == nil || len(cut.Command) > bound+64 || !strings.HasPrefix(cut.Command, kept) ||
		!utf8.ValidString(cut.Command) || !strings.Contains(cut.Command[len(kept):], "cut") ||
		js.Processes[0].Trimmed["command_bytes"] != uint64(len(long)-len(kept)) {
		t.Errorf("trimmed process: command of %d bytes (%q...), trimmed %v; want the first %d bytes, marked",
			len(cut.Command), cut.Command[len(kept)-8:min(len(cut.Command), len(kept)+40)], js.Processes[0].Trimmed, len(kept))
	}
	if short.Trimmed == nil || short.Command != cmds[1] || js.Processes[1].Trimmed["command_bytes"] != 0 {
		t.Errorf("trimmed process: command %q, trimmed %v; want it whole", short.Command, js.Processes[1].Trimmed)
	}
	if full.Trimmed != nil || full.Command != long {
		t.Errorf("process kept in full: command of %d bytes, want %d", len(full.Command), len(long))
	}
	if len(b) > 2*len(long)-bound {
		t.Errorf("summary of %d bytes: the trimmed command line is in it whole", len(b))
	}
}
