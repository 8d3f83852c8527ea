package session

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/procfs"
)

// adopt starts tracing a running process. For -p (explicit) a library it
// maps that tttrace cannot read is an error; with All only TT-Metal
// processes are adopted. alive: the process is known to be running now (it
// was found in /proc, not in a record read late), so its end may also be
// watched through a pidfd.
func (s *session) adopt(pid int, explicit, alive bool) error {
	objs, loader, err := s.host.Objects(pid)
	if err != nil {
		if explicit {
			return errorf(ErrNoProcess, "-p %d: %v", pid, err)
		}
		return nil
	}
	if loader != "" {
		only := pid
		if s.loaderEverywhere() {
			only = 0
		}
		if err := s.attachLoader(loader, only); err != nil && explicit {
			fmt.Fprintf(s.log, "tttrace: note: pid %d: %v\n", pid, err)
		}
	}
	found := false
	for _, o := range objs {
		v, err := s.classify(o, explicit)
		if err != nil {
			return err
		}
		found = found || v == LibAttached
	}
	if found || explicit {
		s.ops.scan(objs, explicit)
	}
	if !explicit && !found {
		return nil
	}
	if !found {
		// Not loaded yet: probe the files it would load, and hear of the
		// load through ld.so otherwise.
		if s.cfg.Lib == "" {
			s.attachCandidates(s.host.Candidates(pid, nil))
		}
		fmt.Fprintf(s.log, "tttrace: pid %d has not loaded libtt_metal.so yet: waiting for it\n", pid)
	}
	info := s.host.Info(pid)
	info.AttachedMidRun = found
	st := s.track(uint32(pid), info, true, alive)
	st.hasLib = found
	if found {
		s.sites.snapshot(uint32(pid))
	}
	if found && alive {
		// Attached to a running process (-p, --all at start) that had
		// loaded TT-Metal: its chips may be open already. (A process met
		// through its link map is read only if its library was probed
		// late, in onLinkMap: else its chips open under the probes.)
		s.mem.readRoot(uint32(pid))
	}
	s.anyLib = s.anyLib || found
	return nil
}

// classify says whether the shared object at path is TT-Metal and probes it
// if so. strict turns an unreadable TT-Metal library into an error.
func (s *session) classify(path string, strict bool) (Verdict, error) {
	key, err := s.host.Key(path)
	if err != nil {
		return LibOther, nil
	}
	if v, ok := s.libKind[key]; ok {
		return v, nil
	}
	v, err := s.be.Library(path, true)
	if v != LibGone {
		s.libKind[key] = v
	}
	if v == LibAttached {
		s.attached++
	}
	if err != nil {
		if strict {
			return v, err
		}
		fmt.Fprintf(s.log, "tttrace: not probing %s: %v\n", path, err)
	}
	return v, nil
}

// attachLibrary probes the TT-Metal library at path (--lib): every
// failure is an error.
func (s *session) attachLibrary(path string) error {
	key, err := s.host.Key(path)
	if err != nil {
		return errorf(ErrNoLibrary, "%s: %w", path, err)
	}
	v, err := s.be.Library(path, false)
	s.libKind[key] = v
	return err
}

// attachCandidates probes every candidate that is a TT-Metal library.
func (s *session) attachCandidates(paths []string) {
	for _, p := range paths {
		_, _ = s.classify(p, false)
	}
}

// defaultLoader is the dynamic loader of x86-64 programs.
const defaultLoader = "/lib64/ld-linux-x86-64.so.2"

// loaderKey is a dynamic loader probed for one process (pid 0: for all).
type loaderKey struct {
	file procfs.FileKey
	pid  int
}

// loaderEverywhere says whether the loader probe must fire in every process
// (filtered in BPF) rather than only in the traced ones. Its breakpoint
// costs every process on the machine a trap at start-up and at each
// dlopen, so it is limited to the processes known up front (-p, and -- CMD
// with --follow=false). --all must hear processes it does not know yet;
// with --follow (the default of -- CMD) a child is added to the BPF filter
// when it forks, but the consumer reads the fork record later, and a child
// that execs and dlopens before would go unheard by a per-process probe
// added only then.
func (s *session) loaderEverywhere() bool {
	return s.cfg.All || s.cfg.Follow
}

// attachLoader probes a dynamic loader's _dl_debug_state (once per file and
// pid) for process pid, or for every process (pid 0).
func (s *session) attachLoader(path string, pid int) error {
	file, err := s.host.Key(path)
	if err != nil {
		return err
	}
	key := loaderKey{file, pid}
	if s.loaders[key] || s.loaders[loaderKey{file, 0}] {
		return nil
	}
	if err := s.be.Loader(path, pid); err != nil {
		return err
	}
	s.loaders[key] = true
	return nil
}

// track starts following pid, and puts it in the report when explicit.
// watch: the process is known to be running now, so it is added to the BPF
// filter and a pidfd may watch it. Otherwise pid comes from a record read
// perhaps late (it may name another process by now): a forked child BPF
// already filters, or, with All, a process found by its calls. Every
// traced process's end also comes as a record, in stream order.
func (s *session) track(pid uint32, info devices.ProcessInfo, explicit, watch bool) *procState {
	if watch {
		if err := s.be.AddPID(pid); err != nil {
			fmt.Fprintf(s.log, "tttrace: trace pid %d: %v\n", pid, err)
		}
	}
	st := &procState{info: info, watched: watch}
	s.procs[pid] = st
	if explicit {
		s.enter(pid, st)
	}
	if watch && (s.child == nil || uint32(s.child.Pid()) != pid) {
		go func() {
			s.host.WaitExit(int(pid))
			s.exits <- exitNote{pid: pid}
			s.be.Wake()
		}()
	}
	return st
}

// checkGone queues the end of every traced process the BPF filter no
// longer holds: its last thread exited, and the record saying so was lost
// (a full ring). The filter is not used with All.
func (s *session) checkGone() {
	if s.cfg.All {
		return
	}
	for pid, st := range s.procs {
		if !st.watched && !st.ending && !s.isChild(pid) && !s.be.Traced(pid) {
			st.ending = true
			s.ends = append(s.ends, exitNote{pid: pid})
		}
	}
}

func (s *session) isChild(pid uint32) bool { return s.child != nil && uint32(s.child.Pid()) == pid }

// enter puts a traced process in the ledger and the report.
func (s *session) enter(pid uint32, st *procState) {
	st.inLedger = true
	st.info.Placement, st.info.Chips = s.placement(pid, st)
	s.facts.podOf(pid, &st.info.Placement)
	s.ledger.SetProcessInfo(pid, st.info)
	s.sites.enter(pid)
}

// placement is the host and the ranks of pid, from its environment (what
// it started with; the command's is tttrace's own), and the physical chips
// behind its chip ids, from its environment and its /dev/tenstorrent; the
// ranks and chips are unknown when the environment cannot be read. A chip
// is named only once pid is seen holding its device open (chipheld.go).
func (s *session) placement(pid uint32, st *procState) (devices.Placement, devices.ChipMap) {
	var getenv func(string) (string, bool)
	if s.isChild(pid) {
		// The command inherits tttrace's environment; its /proc file may
		// be read mid-exec, empty.
		getenv = os.LookupEnv
	} else {
		env, err := procfs.Environ(int(pid))
		if err != nil {
			return devices.Placement{Host: s.cfg.Host}, devices.NewChipMap(func(string) (string, bool) { return "", false }, nil,
				fmt.Errorf("its environment: %w", err))
		}
		getenv = func(k string) (string, bool) { return procfs.Getenv(env, k) }
	}
	root, sys := procfs.Root(int(pid)), "/sys"
	if s.cfg.DevRoot != "" {
		root, sys = s.cfg.DevRoot, filepath.Join(s.cfg.DevRoot, "sys")
	}
	tt, err := procfs.TTDevices(root, sys)
	devs := make([]devices.PCIChip, len(tt))
	for i, d := range tt {
		devs[i] = devices.PCIChip{Num: d.Num, PCI: d.PCI, DeviceID: d.PCIDeviceID}
	}
	if errors.Is(err, os.ErrNotExist) {
		err = errors.New("no /dev/tenstorrent")
	}
	return devices.PlacementOf(s.cfg.Host, getenv), s.facts.holding(pid, st, devices.NewChipMap(getenv, devs, err), tt)
}

// reapExits applies the ends of processes reported so far. A process's
// records were all committed before it ended, so after a drain that starts
// after the report none of them is still in the ring.
func (s *session) reapExits() {
	notes := s.ends
	s.ends = nil
	for {
		select {
		case n := <-s.exits:
			notes = append(notes, n)
			continue
		default:
		}
		break
	}
	if len(notes) == 0 {
		return
	}
	s.drain()
	for _, n := range notes {
		st := s.procs[n.pid]
		if st == nil {
			continue
		}
		if !n.known {
			n.code, n.signal = -1, 0
			if st.mainStatus != nil {
				ws := unix.WaitStatus(*st.mainStatus)
				if ws.Signaled() {
					n.code, n.signal = -1, int(ws.Signal())
				} else {
					n.code = ws.ExitStatus()
				}
			}
		}
		_ = s.be.RemovePID(n.pid)
		s.ops.frames.ended(n.pid)
		s.facts.podEnded(n.pid)
		if py := s.sites.ended(n.pid); py != nil {
			// Its code objects were described at event time; the memory
			// of a process that ended is no use, its descriptor is.
			defer py.Close()
		}
		delete(s.procs, n.pid)
		s.ended[n.pid] = true
		if !st.inLedger {
			s.followedQuiet++
			continue
		}
		ev := events.Event{Kind: events.KindExit, Pid: n.pid, TsNs: monotonicNow(), ExitCode: n.code, ExitSignal: n.signal, Chip: -1}
		s.join.processEnded(n.pid)
		s.emit(&ev)
		more := len(s.procs) > 0 || s.cfg.All
		// Its leak lists stay in the ledger, which does not change
		// during the sinks' calls.
		one, ok := s.ledger.ProcessSummaryStreamed(n.pid)
		if !ok {
			continue
		}
		for _, k := range s.sinks {
			k.ProcessEnded(&one, more)
		}
		s.trim()
	}
}

// trim keeps the ledger's ended processes within Config.KeepEnded (and
// KeepEndedTotals); a trimmed process takes its stack state with it (the
// ledger held it as its site source).
func (s *session) trim() {
	for _, t := range s.ledger.Trim() {
		if t.Current {
			s.sites.forget(t.Pid)
			delete(s.ended, t.Pid) // the ledger no longer knows it: a new process there starts afresh
		}
	}
}

// reborn handles a pid seen again after its process ended: every record of
// the ended process was drained before its end was applied, so this is a
// new process the kernel gave the same pid.
func (s *session) reborn(pid uint32) {
	if s.ended[pid] {
		delete(s.ended, pid)
		s.sites.retire(pid)
		s.ledger.NewIncarnation(pid)
	}
}

// onFork starts tracing a forked child (BPF already added it to the filter).
func (s *session) onFork(ev *events.Event) {
	if s.procs[ev.Pid] != nil {
		return
	}
	s.reborn(ev.Pid)
	info := s.host.Info(int(ev.Pid))
	info.Parent = ev.ParentPid
	// BPF put it in the filter at the fork; its end comes as a record.
	st := s.track(ev.Pid, info, false, false)
	if ps := s.procs[ev.ParentPid]; ps != nil {
		// A fork inherits the parent's mappings.
		st.hasLib = ps.hasLib
	}
	s.sites.inherit(ev.Pid, ev.ParentPid, ev.TsNs)
}

// onCall notes a TT-Metal call of ev.Pid before it is applied.
func (s *session) onCall(ev *events.Event) {
	if s.cfg.All && s.procs[ev.Pid] == nil {
		// All: a process whose link-map record came too late to adopt it
		// (it may have ended already): track it now.
		s.reborn(ev.Pid)
		s.track(ev.Pid, s.host.Info(int(ev.Pid)), true, false)
	}
	st := s.procs[ev.Pid]
	if st == nil {
		return
	}
	// The record itself proves the library was mapped: a conclusion that
	// holds even when the process is gone from /proc by the time the
	// record is read (the link-map record's look at /proc came too late).
	st.hasLib = true
	s.anyLib = true
	if !st.inLedger {
		// A followed child's first TT-Metal call: it joins the report,
		// under the command it has now (it may have exec'ed).
		if c := s.host.Info(int(ev.Pid)).Command; c != "" {
			st.info.Command = c
		}
		s.enter(ev.Pid, st)
	}
}

// onLinkMap looks for a TT-Metal library newly mapped in pid.
func (s *session) onLinkMap(pid uint32) {
	defer func() {
		// The objects BPF sent before this record, kept for when pid's
		// maps can no longer be read (linkwalk.go).
		s.sites.takeWalk(pid, s.procs[pid] != nil)
		// A library mapped or unmapped in a process using TT-Metal: retake
		// its maps now, while it is surely alive (its stacks may be read
		// after it ended). Processes that do not use TT-Metal (the shells
		// and tools a command runs) cost nothing here.
		if st := s.procs[pid]; st != nil {
			if st.hasLib {
				s.sites.snapshotSoon(pid)
			} else {
				s.sites.warmEarly(pid)
				s.sites.pythonSoon(pid) // early: before it loads TT-Metal and allocates
			}
		}
	}()
	st := s.procs[pid]
	if st == nil {
		if !s.cfg.All {
			return
		}
		// All: a process we have not met. Its TT-Metal library was probed
		// in advance (by another process, --lib, a candidate) or only now:
		// then the process ran on while it was being probed (the link-map
		// record does not stop it), and its calls before are missed.
		s.reborn(pid)
		before := s.attached
		_ = s.adopt(int(pid), false, false)
		if st = s.procs[pid]; st != nil {
			st.info.AttachedMidRun = false
			late := s.attached != before && st.hasLib
			if late {
				s.lateLibrary(pid, st, "its TT-Metal library")
			}
			s.enter(pid, st)
			if late {
				s.mem.readRoot(pid)
			}
			s.checkLate(pid, st)
		}
		return
	}
	if st.hasLib {
		// A TT-NN library loaded after TT-Metal's first call.
		if s.ops.on {
			if objs, _, err := s.host.Objects(int(pid)); err == nil {
				s.ops.scan(objs, false)
			}
		}
		return
	}
	s.checkLate(pid, st)
}

// lateLibrary marks pid incomplete: lib was probed only after pid had
// mapped it, so its calls before are not seen. The summary
// (attached_mid_run, late_library), the report and the exit status say so.
func (s *session) lateLibrary(pid uint32, st *procState, lib string) {
	st.info.AttachedMidRun = true
	st.info.LateLibrary = true
	fmt.Fprintf(s.log, "tttrace: pid %d loaded %s, which was not probed in advance: "+
		"calls made before it was attached are not seen, its numbers are incomplete (give --lib to trace it from the start)\n", pid, lib)
}

// checkLate finds pid's TT-Metal library after a link-map change; if it had
// to be attached only now, calls made before are unseen: say so.
func (s *session) checkLate(pid uint32, st *procState) {
	objs, _, err := s.host.Objects(int(pid))
	if err != nil {
		return
	}
	defer s.ops.scan(objs, false)
	for _, o := range objs {
		key, err := s.host.Key(o)
		if err != nil {
			continue
		}
		_, known := s.libKind[key]
		v, _ := s.classify(o, false)
		if v != LibAttached {
			continue
		}
		st.hasLib = true
		s.anyLib = true
		if !known {
			s.lateLibrary(pid, st, o)
			s.enter(pid, st)
		}
	}
}
