package session

// Replay: the NDJSON of a run (--json, events included) read back through
// the live path: each event line decoded into an events.Event and handed to
// the same session.apply (the ledger, its notices to the sinks) and
// session.send (the sinks) a live record goes through, each process's end
// reported as reapExits reports it, the summary made by the same ledger.
// What the ledger is not told by events comes from the file's other lines:
// the sites (site lines), when the live ledger concluded a layout or a
// request on a tick (the place of its l1_clash or alloc_failed line), and
// what tttrace learnt of each process from its environment (command,
// placement, physical chips, interpreter, loader drops: its process_summary
// or summary line), as do the losses by kind of the summary.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
)

// The bounds of a replay: a file can make it hold no more than this (and
// the ledger's own bounds, as live: --max-chips, --keep-ended, ...).
const (
	// ReplayMaxLine bounds an event, site or notice line.
	ReplayMaxLine = 16 << 20
	// ReplayMaxSummaryLine bounds a summary, process_summary or snapshot
	// line (a run that left a million buffers has a summary of ~150 MB).
	ReplayMaxSummaryLine = 1 << 30
	// ReplayMaxSiteBytes bounds the site lines kept, all processes.
	ReplayMaxSiteBytes = 512 << 20
	// ReplayMaxRunning bounds the processes running at once (seen, not
	// exited): far more than a host runs.
	ReplayMaxRunning = 1 << 17
	// ReplayMaxMarks bounds the window lines (tttrace mark): each visits
	// every process in the ledger.
	ReplayMaxMarks = 1 << 16
)

// ReplayConfig configures the replay's ledger as the run's was (the flags
// it had: --l1-warn, --max-chips, --keep-ended, --keep-ended-totals).
type ReplayConfig struct {
	L1Warn                     uint64
	MaxChips                   int
	SiteUsage                  bool // per-site accounting (--pprof, --folded)
	KeepEnded, KeepEndedTotals int
	Log                        io.Writer
	// Set names the flags above given on the command line ("l1-warn",
	// "max-chips", "keep-ended", "keep-ended-totals"): the file's run
	// line (its first, sinks.Run) gives the others, as the run had them.
	Set map[string]bool
}

// fromRun takes the values of the run line for the flags not Set, and
// says where a flag given differs from the run's.
func (c *ReplayConfig) fromRun(run *sinks.Run, log io.Writer) {
	if log == nil {
		log = io.Discard
	}
	take := func(flag string, dst *int, v int) {
		switch {
		case !c.Set[flag]:
			*dst = v
		case *dst != v:
			fmt.Fprintf(log, "tttrace: note: replaying with --%s %d; the run had %d\n", flag, *dst, v)
		}
	}
	switch {
	case !c.Set["l1-warn"]:
		c.L1Warn = run.L1Warn
	case c.L1Warn != run.L1Warn:
		fmt.Fprintf(log, "tttrace: note: replaying with --l1-warn %d; the run had %d\n", c.L1Warn, run.L1Warn)
	}
	take("max-chips", &c.MaxChips, run.MaxChips)
	take("keep-ended", &c.KeepEnded, run.KeepEnded)
	take("keep-ended-totals", &c.KeepEndedTotals, run.KeepEndedTotals)
}

// runHead starts the run line.
const runHead = `{"type":"run"`

// ReplayResult is what a replay made.
type ReplayResult struct {
	Summary devices.Summary
	// SummaryOnly: the file had no events (--no-events): the sinks got its
	// summary as it is.
	SummaryOnly bool
}

// ReplayError is why a file could not be replayed: the line it stopped
// at and what was read before it.
type ReplayError struct {
	Line      uint64 // 1-based; 0: before the first line
	Events    uint64 // event lines applied before it
	Processes int    // processes seen before it
	Err       error
}

func (e *ReplayError) Error() string {
	return fmt.Sprintf("line %d: %v (read before it: %d events of %d process(es))", e.Line, e.Err, e.Events, e.Processes)
}

func (e *ReplayError) Unwrap() error { return e.Err }

// Replay reads the NDJSON of a run from in and feeds out with it as the
// run fed its own outputs. The sinks are closed when it returns.
func Replay(in io.Reader, cfg ReplayConfig, out []sinks.Sink) (res *ReplayResult, err error) {
	count := &noticeCount{}
	r := &replay{rd: bufio.NewReaderSize(in, 1<<16), procs: map[uint32]*replayProc{}, count: count}
	if head, _ := r.rd.Peek(len(runHead)); string(head) == runHead {
		line, err := r.next()
		var run sinks.Run
		if err == nil {
			err = json.Unmarshal(line, &run)
		}
		if err == nil && (run.MaxChips <= 0 || run.KeepEnded <= 0 || run.KeepEndedTotals <= 0) {
			err = errors.New("max_chips, keep_ended and keep_ended_totals must be positive")
		}
		if err != nil {
			for _, k := range out {
				_ = k.Close()
			}
			return nil, &ReplayError{Line: r.line, Err: fmt.Errorf("run: %w", err)}
		}
		cfg.fromRun(&run, cfg.Log)
	}
	s := newSession(Config{NoStacks: true, L1Warn: cfg.L1Warn, MaxChips: cfg.MaxChips, SiteUsage: cfg.SiteUsage,
		KeepEnded: cfg.KeepEnded, KeepEndedTotals: cfg.KeepEndedTotals, Log: cfg.Log}, nil, nil, append(append([]sinks.Sink{}, out...), count), nil)
	defer func() {
		for _, k := range out {
			if cerr := k.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("write output: %w", cerr)
			}
		}
	}()
	r.s = s
	res, err = r.run()
	if err != nil {
		var pids int
		for range r.seen {
			pids++
		}
		return nil, &ReplayError{Line: r.line, Events: r.events, Processes: pids, Err: err}
	}
	return res, nil
}

// replay is one file being read.
type replay struct {
	s     *session
	rd    *bufio.Reader
	buf   []byte
	line  uint64
	ev    events.Event
	procs map[uint32]*replayProc // each pid's current process
	seen  map[uint32]struct{}    // every pid seen (for the error's count)

	running   int
	siteBytes int
	events    uint64
	marks     int // window lines
	// notices: the l1_clash and alloc_failed lines since the last event;
	// inFile counts those lines read, count those the ledger made.
	notices []noticeLine
	inFile  uint64
	count   *noticeCount
	// ending: the pid whose exit was applied, whose end is reported at
	// the next line (a process_summary of it says others went on).
	ending    uint32
	endingSet bool
}

// replayProc is one process of the file: its sites, as the site lines
// describe them (devices.SiteSource of the ledger).
type replayProc struct {
	exited bool
	sites  map[uint32][]byte
	sent   map[uint32]struct{} // sites announced to the sinks
}

func (p *replayProc) Site(id uint32) (devices.Site, bool) {
	raw, ok := p.sites[id]
	if !ok {
		return devices.Site{}, false
	}
	var d devices.Site
	if err := json.Unmarshal(raw, &d); err != nil {
		return devices.Site{}, false
	}
	return d, true
}

// Python: the interpreter is the summary's (patched in, replaySummary).
func (p *replayProc) Python() *devices.PythonInfo { return nil }

// noticeCount counts the notices the ledger makes that a tick's flush can
// make too.
type noticeCount struct {
	sinks.Base
	n uint64
}

func (c *noticeCount) Notice(n *devices.Notice) {
	if flushable(n.Type) {
		c.n++
	}
}

func flushable(k devices.NoticeKind) bool {
	return k == devices.NoticeL1Clash || k == devices.NoticeAllocFailed
}

type noticeLine struct {
	Type devices.NoticeKind `json:"type"`
	Pid  uint32             `json:"pid"`
	Tid  uint32             `json:"tid"`
	TsNs uint64             `json:"ts_ns"`
}

// header is what every line is first read as.
type header struct {
	Type string  `json:"type"`
	Pid  *uint32 `json:"pid"`
	Site uint32  `json:"site"`
}

func (r *replay) run() (*ReplayResult, error) {
	r.seen = map[uint32]struct{}{}
	for {
		line, err := r.next()
		if err == io.EOF {
			if r.endingSet {
				r.end(nil)
			}
			return nil, errors.New("the file ends without its summary line: it was cut, or is not the NDJSON of a tttrace run")
		}
		if err != nil {
			return nil, err
		}
		ok, err := events.ParseJSON(line, &r.ev)
		if err != nil {
			return nil, err
		}
		var h header
		if !ok {
			if err := json.Unmarshal(line, &h); err != nil {
				return nil, fmt.Errorf("not a JSON object: %w", err)
			}
		}
		if r.endingSet {
			if !ok && h.Type == "process_summary" {
				if err := r.endWith(line); err != nil {
					return nil, err
				}
				continue
			}
			r.end(nil)
		}
		if ok {
			if err := r.event(&r.ev); err != nil {
				return nil, err
			}
			continue
		}
		switch h.Type {
		case "site":
			if err := r.site(line, h); err != nil {
				return nil, err
			}
		case "l1_clash", "alloc_failed":
			var n noticeLine
			if err := json.Unmarshal(line, &n); err != nil {
				return nil, fmt.Errorf("%s: %w", h.Type, err)
			}
			r.notices = append(r.notices, n)
			if len(r.notices) > 1<<16 {
				return nil, errors.New("more than 65536 l1_clash and alloc_failed lines in a row")
			}
		case "window":
			// A mark: its window starts here, as it did in the run.
			var m devices.Mark
			if err := json.Unmarshal(line, &m); err != nil {
				return nil, fmt.Errorf("window: %w", err)
			}
			if r.marks++; r.marks > ReplayMaxMarks {
				return nil, fmt.Errorf("more than %d window lines", ReplayMaxMarks)
			}
			r.s.mark(m.Name, m.TsNs)
		case "snapshot":
			// A snapshot's summary: made again at the end.
		case "process_summary":
			return nil, errors.New("a process_summary that does not follow its process's exit line")
		case "run":
			return nil, errors.New("a run line that is not the first: two runs in one file?")
		case "summary":
			res, err := r.summary(line)
			if err != nil {
				return nil, err
			}
			if _, err := r.next(); err != io.EOF {
				if err == nil {
					err = errors.New("a line after the summary line: two runs in one file?")
				}
				return nil, err
			}
			return res, nil
		default:
			if k := new(devices.NoticeKind); k.UnmarshalText([]byte(h.Type)) == nil {
				// The ledger's other notices (l1_headroom, the trace
				// hazards, per_core_address_divergence, ...): made again
				// during the event that follows, never on a tick.
				continue
			}
			return nil, fmt.Errorf("a record of unknown type %q (not written by this tttrace)", h.Type)
		}
	}
}

// next reads the next line (without its newline), within the bounds.
func (r *replay) next() ([]byte, error) {
	r.buf = r.buf[:0]
	limit := ReplayMaxLine
	for {
		chunk, err := r.rd.ReadSlice('\n')
		if len(r.buf)+len(chunk) > limit && limit == ReplayMaxLine && bigLine(r.buf, chunk) {
			limit = ReplayMaxSummaryLine
		}
		if len(r.buf)+len(chunk) > limit {
			r.line++
			return nil, fmt.Errorf("a line longer than %d MiB", limit>>20)
		}
		r.buf = append(r.buf, chunk...)
		switch {
		case err == nil:
			r.line++
			return r.buf[:len(r.buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF && len(r.buf) == 0:
			return nil, io.EOF
		case err == io.EOF:
			r.line++
			return nil, errors.New("the last line has no end: the file was cut")
		default:
			return nil, err
		}
	}
}

// bigLine says a line starting with head, then more, is a summary's.
func bigLine(head, more []byte) bool {
	b := append(append([]byte{}, head[:min(len(head), 40)]...), more[:min(len(more), 40)]...)
	for _, p := range []string{`{"type":"summary"`, `{"type":"process_summary"`, `{"type":"snapshot"`} {
		if len(b) >= len(p) && string(b[:len(p)]) == p {
			return true
		}
	}
	return false
}

// proc returns pid's current process in the file; a record of a pid whose
// process exited is a new process the kernel gave that pid (the live
// session drains a process's records before its end).
func (r *replay) proc(pid uint32) (*replayProc, error) {
	p := r.procs[pid]
	if p != nil && !p.exited {
		return p, nil
	}
	if r.running >= ReplayMaxRunning {
		return nil, fmt.Errorf("more than %d processes running at once", ReplayMaxRunning)
	}
	if p != nil {
		r.s.ledger.NewIncarnation(pid)
	}
	p = &replayProc{sites: map[uint32][]byte{}, sent: map[uint32]struct{}{}}
	r.procs[pid] = p
	r.seen[pid] = struct{}{}
	r.running++
	r.s.ledger.SetSites(pid, p)
	return p, nil
}

// event applies one event line as the live session's emit does.
func (r *replay) event(ev *events.Event) error {
	r.flushes(ev)
	r.events++
	var p *replayProc
	switch ev.Kind {
	case events.KindLost:
	case events.KindFork:
		// The live session takes a pid seen forked as a new process.
		if q := r.procs[ev.Pid]; q != nil && q.exited {
			r.s.ledger.NewIncarnation(ev.Pid)
			delete(r.procs, ev.Pid)
		}
	default:
		var err error
		if p, err = r.proc(ev.Pid); err != nil {
			return err
		}
	}
	r.s.apply(ev)
	if p != nil && ev.Site != 0 {
		// As allocSites.announceSite: a site line comes before the first
		// event naming it, and once.
		if _, sent := p.sent[ev.Site]; !sent {
			p.sent[ev.Site] = struct{}{}
			if d, ok := p.Site(ev.Site); ok {
				for _, k := range r.s.sites.sinks {
					k.Site(ev.Pid, &d)
				}
			}
		}
	}
	r.s.send(ev)
	if ev.Kind == events.KindExit && p != nil {
		p.exited = true
		r.running--
		r.ending, r.endingSet = ev.Pid, true
	}
	return nil
}

// flushes runs the checks the live ledger ran on a tick before ev: each
// l1_clash or alloc_failed line before ev's that ev's own apply cannot make
// (another thread's, and not its process's exit) and the replay has not
// made yet came from a tick's FlushBefore, which ran every check and
// request older than it.
func (r *replay) flushes(ev *events.Event) {
	for _, n := range r.notices {
		r.inFile++
		own := n.Pid == ev.Pid && (n.Tid == ev.Tid || ev.Kind == events.KindExit)
		if !own && r.count.n < r.inFile {
			r.s.ledger.FlushBefore(n.TsNs + 1)
		}
	}
	r.notices = r.notices[:0]
}

// site keeps a site line for the events that name it.
func (r *replay) site(line []byte, h header) error {
	if h.Pid == nil || h.Site == 0 {
		return errors.New("a site line without pid or site")
	}
	var d devices.Site
	if err := json.Unmarshal(line, &d); err != nil {
		return fmt.Errorf("site: %w", err)
	}
	r.siteBytes += len(line)
	if r.siteBytes > ReplayMaxSiteBytes {
		return fmt.Errorf("more than %d MiB of site lines", ReplayMaxSiteBytes>>20)
	}
	p, err := r.proc(*h.Pid)
	if err != nil {
		return err
	}
	p.sites[h.Site] = append([]byte(nil), line...)
	return nil
}

// processFacts is what a process_summary or summary line says of a
// process that the ledger does not learn from events.
type processFacts = devices.ProcessSummary

// endWith reports the end of r.ending with its process_summary line: other
// processes went on.
func (r *replay) endWith(line []byte) error {
	var ps devices.ProcessSummary
	if err := json.Unmarshal(line, &ps); err != nil {
		return fmt.Errorf("process_summary: %w", err)
	}
	if ps.Pid != r.ending {
		return fmt.Errorf("the process_summary of pid %d follows the exit of pid %d", ps.Pid, r.ending)
	}
	r.end(&ps)
	return nil
}

// end reports the end of r.ending as reapExits does: its summary to the
// sinks (more: others went on, which its process_summary line says), then
// the ledger's retention.
func (r *replay) end(rec *processFacts) {
	pid := r.ending
	r.endingSet = false
	if rec != nil {
		r.s.ledger.SetProcessInfo(pid, infoOf(rec))
	}
	one, ok := r.s.ledger.ProcessSummaryStreamed(pid)
	if ok {
		if rec != nil {
			patchProcess(&one.Processes[0], rec)
		}
		for _, k := range r.s.sinks {
			k.ProcessEnded(&one, rec != nil)
		}
	}
	for _, t := range r.s.ledger.Trim() {
		if t.Current {
			delete(r.procs, t.Pid)
		}
	}
}

// summary ends the replay at the summary line.
func (r *replay) summary(line []byte) (*ReplayResult, error) {
	var rec devices.Summary
	if err := json.Unmarshal(line, &rec); err != nil {
		return nil, fmt.Errorf("summary: %w", err)
	}
	if r.events == 0 && rec.Events > 0 {
		// --no-events: the run's own summary is all there is.
		fmt.Fprintf(r.s.log, "tttrace: the file holds only the run's summary (--no-events): the report is the run's; --pprof, --folded and --perfetto need its events\n")
		for _, k := range r.s.sinks {
			if err := k.Summary(&rec); err != nil {
				return nil, fmt.Errorf("write summary: %w", err)
			}
		}
		return &ReplayResult{Summary: rec, SummaryOnly: true}, nil
	}
	r.flushes(&events.Event{Chip: -1})
	// The processes' facts: each pid's current process is its last entry.
	byPid := map[uint32][]*processFacts{}
	for i := range rec.Processes {
		p := &rec.Processes[i]
		byPid[p.Pid] = append(byPid[p.Pid], p)
	}
	current := map[uint32]bool{}
	for _, pid := range r.s.ledger.Processes() {
		current[pid] = true
		if ps := byPid[pid]; len(ps) > 0 && ps[len(ps)-1].Trimmed == nil {
			r.s.ledger.SetProcessInfo(pid, infoOf(ps[len(ps)-1]))
		}
	}
	for pid, ps := range byPid {
		// A process the live session put in the ledger that made no
		// event.
		if last := ps[len(ps)-1]; !current[pid] && last.Trimmed == nil && len(last.Devices) == 0 && last.Stats.Events == 0 {
			r.s.ledger.SetProcessInfo(pid, infoOf(last))
		}
	}
	r.s.ledger.Flush()
	sum := r.s.ledger.SummaryStreamed()
	sum.LostRecords, sum.LoaderCallsDropped = rec.LostRecords, rec.LoaderCallsDropped
	seen := map[uint32]int{}
	for i := range sum.Processes {
		p := &sum.Processes[i]
		n := seen[p.Pid]
		seen[p.Pid]++
		if ps := byPid[p.Pid]; n < len(ps) {
			patchProcess(p, ps[n])
		}
	}
	for _, k := range r.s.sinks {
		if err := k.Summary(&sum); err != nil {
			return nil, fmt.Errorf("write summary: %w", err)
		}
	}
	return &ReplayResult{Summary: sum}, nil
}

// infoOf is the ledger's ProcessInfo from a process's summary (its
// physical chips are patched in: patchProcess).
func infoOf(p *processFacts) devices.ProcessInfo {
	return devices.ProcessInfo{Command: p.Command, Parent: p.Parent, NsPid: p.NsPid, AttachedMidRun: p.AttachedMidRun,
		Placement: p.Placement, LateLibrary: p.LateLibrary}
}

// patchProcess gives dst what the run learnt of the process outside its
// events, from its recorded summary rec.
func patchProcess(dst, rec *processFacts) {
	if dst.Trimmed == nil {
		dst.Command = rec.Command
	}
	dst.Parent, dst.NsPid, dst.AttachedMidRun, dst.Placement, dst.LateLibrary = rec.Parent, rec.NsPid, rec.AttachedMidRun, rec.Placement, rec.LateLibrary
	dst.LoaderCallsDropped, dst.Python = rec.LoaderCallsDropped, rec.Python
	ids := make(map[int32]devices.ChipIdentity, len(rec.Devices))
	for _, d := range rec.Devices {
		ids[d.Device] = d.ChipIdentity
	}
	for i := range dst.Devices {
		if id, ok := ids[dst.Devices[i].Device]; ok {
			dst.Devices[i].ChipIdentity = id
		}
	}
}
