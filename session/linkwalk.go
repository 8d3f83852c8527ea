package session

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/stacks"
)

// The objects of a process's link map, as BPF read them when ld.so said
// the map was consistent (bpf/linkmap.h): one events.LinkObject record per
// object, in list order, before the link-map record of that call. They
// place the process's stacks when its /proc/PID/maps can no longer be read:
// a worker that dlopens TT-Metal, allocates and exits within milliseconds
// is gone before its link-map record is read (docs/stacks.md). /proc stays
// the first source while the process lives: it is read later than the
// walk, so it is never older.

// linkWalk is one walk's objects.
type linkWalk struct {
	seq  uint64 // the walk's (every record of it has it)
	tid  uint32
	next uint32 // the index the next record must have
	done bool   // its last record came: objs is the list
	// cut: the list is not whole (longer than BPF sends, or a read of it
	// failed); unidentified: objects whose file the kernel could not name
	// then (the mmap lock was taken). Their pcs are in no module.
	cut          bool
	unidentified int
	objs         []stacks.LoadedObject
	mods         *stacks.Modules // bound on first use (allocSites.fromWalk)
}

// maxPendingWalks bounds the walks being received: a walk waits only for
// its next records, which follow it in the ring; walks whose records were
// lost are dropped when the bound is met.
const maxPendingWalks = 256

// linkWalks assembles each process's walks from their records.
type linkWalks struct {
	pending map[uint32]*linkWalk // by pid: the walk being received
}

// add takes one record. A record that does not continue its process's
// walk (a record before it was lost) drops the walk: a list with a hole
// would place pcs in the wrong objects' absence.
func (l *linkWalks) add(o *events.LinkObject) {
	if l.pending == nil {
		l.pending = map[uint32]*linkWalk{}
	}
	w := l.pending[o.Pid]
	switch {
	case o.Index >= events.LinkObjectsMax:
		delete(l.pending, o.Pid)
		return
	case o.Index == 0:
		if w == nil && len(l.pending) >= maxPendingWalks {
			clear(l.pending)
		}
		w = &linkWalk{seq: o.Seq, tid: o.Tid}
		l.pending[o.Pid] = w
	case w == nil || w.done || w.seq != o.Seq || w.tid != o.Tid || o.Index != w.next:
		delete(l.pending, o.Pid)
		return
	}
	w.next = o.Index + 1
	if o.Flags&events.LinkObjectNone == 0 {
		switch {
		case o.Flags&events.LinkObjectNoFile != 0:
			// The vDSO: no file, as /proc's [vdso] (stacks.Bind skips it).
		case o.Flags&events.LinkObjectVmaBusy != 0:
			w.unidentified++
		default:
			w.objs = append(w.objs, stacks.LoadedObject{Bias: o.Addr, Dev: o.Dev, Ino: o.Ino, Name: string(o.Name), Main: o.Index == 0})
		}
	}
	if o.Flags&events.LinkObjectLast != 0 {
		w.done = true
		w.cut = o.Flags&events.LinkObjectsCut != 0
	}
}

// take returns pid's walk if it is whole, and forgets it either way: it
// belongs to the link-map record being handled.
func (l *linkWalks) take(pid uint32) *linkWalk {
	w := l.pending[pid]
	delete(l.pending, pid)
	if w == nil || !w.done {
		return nil
	}
	return w
}

// onLinkObject takes a link_object_record.
func (a *allocSites) onLinkObject(raw []byte) {
	var o events.LinkObject
	if err := events.DecodeLinkObject(raw, &o); err != nil {
		a.bad(err)
		return
	}
	if a.on {
		a.walks.add(&o)
	}
}

// takeWalk gives pid, a traced process (tracked), the walk BPF sent with
// the link-map record being handled, if a whole one came; it keeps its
// last walk otherwise.
func (a *allocSites) takeWalk(pid uint32, tracked bool) {
	w := a.walks.take(pid)
	if ps := a.procs[pid]; ps != nil && ps.forkWalk {
		// Its link map changed since its fork: its parent's no longer
		// describes it.
		ps.walk, ps.forkWalk = nil, false
	}
	if w == nil || !tracked || !a.on {
		return
	}
	a.procStacksOf(pid).walk = w
}

// fromWalk makes ps.mods the modules of pid's last walk, when its maps
// cannot be read (it ended): the objects' files come from the cache by
// their identity, else by their paths in the process's root, its
// parent's, or tttrace's own, each checked by device and inode
// (stacks.BindObjects). It reports whether there were any.
func (a *allocSites) fromWalk(pid uint32, ps *procStacks) bool {
	w := ps.walk
	if w == nil {
		return false
	}
	if w.mods == nil {
		mods, err := a.cache.BindObjects(w.objs, objectPaths(pid, ps.parent))
		if err != nil {
			fmt.Fprintf(a.log, "tttrace: pid %d: %v\n", pid, err)
			mods = &stacks.Modules{}
		}
		w.mods = mods
		if n := len(mods.Skipped); n > 0 {
			fmt.Fprintf(a.log, "tttrace: pid %d ended before its maps were read; of its link map, %d object(s) cannot place its stacks: %s\n",
				pid, n, strings.Join(mods.Skipped[:min(n, 3)], "; "))
		}
	}
	if w.mods.Len() == 0 {
		return false
	}
	if ps.mods != w.mods {
		ps.mods = w.mods
		ps.retried = false
		a.forgetKnown(pid, ps)
		a.warmFiles(w.mods)
	}
	ps.modsMiss = events.SiteComplete
	ps.inherited = false
	return true
}

// objectPaths is where the file of an object of pid's link map may be
// opened: the process's own view (its executable for the main program, its
// root, its working directory for a relative name) while it lasts, then
// its parent's (a fork shares its executable and mount namespace), then
// tttrace's. stacks.BindObjects takes a path only if it opens the very
// file mapped.
func objectPaths(pid, parent uint32) func(stacks.LoadedObject) []string {
	return func(o stacks.LoadedObject) []string {
		var out []string
		if o.Main {
			out = append(out, fmt.Sprintf("/proc/%d/exe", pid))
			if parent != 0 {
				out = append(out, fmt.Sprintf("/proc/%d/exe", parent))
			}
		}
		switch {
		case o.Name == "":
		case !strings.HasPrefix(o.Name, "/"):
			out = append(out, filepath.Join(fmt.Sprintf("/proc/%d/cwd", pid), o.Name))
		default:
			out = append(out, procfs.Path(int(pid), o.Name))
			if parent != 0 {
				out = append(out, procfs.Path(int(parent), o.Name))
			}
			out = append(out, o.Name)
		}
		return out
	}
}
