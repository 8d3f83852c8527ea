package session

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/pyframes"
	"github.com/tttrace/tttrace/stacks"
)

func linkObj(seq uint64, pid, index uint32, flags uint8, o stacks.LoadedObject) *events.LinkObject {
	return &events.LinkObject{Seq: seq, Pid: pid, Tid: pid, Index: index, Flags: flags, Addr: o.Bias, Dev: o.Dev, Ino: o.Ino, Name: []byte(o.Name)}
}

// A walk is taken only whole: its records in order from index 0 to the
// last; a record lost in between, a walk without its last record, records
// of another walk or thread mixed in, or an index past the bound drop it.
// The vDSO's record names no file; an object whose file the kernel could
// not name then is counted.
func TestLinkWalks(t *testing.T) {
	a := stacks.LoadedObject{Bias: 0x1000, Dev: 1, Ino: 2, Name: "/usr/bin/prog", Main: true}
	b := stacks.LoadedObject{Bias: 0x7f0000000000, Dev: 1, Ino: 3, Name: "/lib/libb.so"}
	var l linkWalks
	l.add(linkObj(10, 5, 0, 0, a))
	l.add(linkObj(10, 5, 1, events.LinkObjectNoFile, stacks.LoadedObject{}))
	l.add(linkObj(10, 5, 2, events.LinkObjectVmaBusy, stacks.LoadedObject{Name: "/lib/busy.so"}))
	l.add(linkObj(10, 5, 3, events.LinkObjectLast, b))
	w := l.take(5)
	if w == nil || !reflect.DeepEqual(w.objs, []stacks.LoadedObject{a, b}) || w.unidentified != 1 || w.cut {
		t.Fatalf("whole walk: %+v", w)
	}
	if l.take(5) != nil {
		t.Error("a walk taken twice")
	}

	broken := map[string][]*events.LinkObject{
		"a record lost":           {linkObj(11, 5, 0, 0, a), linkObj(11, 5, 2, events.LinkObjectLast, b)},
		"no last record":          {linkObj(12, 5, 0, 0, a), linkObj(12, 5, 1, 0, b)},
		"the first record lost":   {linkObj(13, 5, 1, events.LinkObjectLast, b)},
		"another walk's record":   {linkObj(14, 5, 0, 0, a), linkObj(99, 5, 1, events.LinkObjectLast, b)},
		"another thread's record": {linkObj(15, 5, 0, 0, a), {Seq: 15, Pid: 5, Tid: 6, Index: 1, Flags: events.LinkObjectLast}},
		"a record after the last": {linkObj(16, 5, 0, events.LinkObjectLast, a), linkObj(16, 5, 1, events.LinkObjectLast, b)},
		"an index past the bound": {linkObj(17, 5, events.LinkObjectsMax, events.LinkObjectLast, a)},
	}
	for what, recs := range broken {
		for _, o := range recs {
			l.add(o)
		}
		if w := l.take(5); w != nil {
			t.Errorf("%s: walk taken: %+v", what, w)
		}
	}
	// A new walk starts over an unfinished one; a cut list says so.
	l.add(linkObj(20, 5, 0, 0, b))
	l.add(linkObj(21, 5, 0, events.LinkObjectLast|events.LinkObjectsCut, a))
	if w := l.take(5); w == nil || len(w.objs) != 1 || w.objs[0] != a || !w.cut || l.take(5) != nil {
		t.Errorf("the walk after an unfinished one: %+v", w)
	}
	// Walks whose link-map record never comes are bounded.
	for pid := range uint32(3 * maxPendingWalks) {
		l.add(linkObj(30, pid+100, 0, 0, a))
	}
	if len(l.pending) > maxPendingWalks {
		t.Errorf("%d walks pending, at most %d", len(l.pending), maxPendingWalks)
	}
}

// linkObjStep is one link_object_record of pid's walk seq.
func linkObjStep(seq uint64, pid, index uint32, flags uint8, o stacks.LoadedObject) step {
	w := events.LinkObjectWire{Hdr: events.Header{Seq: seq, TsNs: seq * 1000, Pid: pid, Tid: pid, Kind: events.KindLinkObject},
		Addr: o.Bias, Ld: o.Bias + 0x3e00, Dev: uint64(unix.Major(o.Dev))<<20 | uint64(unix.Minor(o.Dev)), Ino: o.Ino,
		Index: index, Size: uint32(len(o.Name)), Flags: flags}
	raw := rawRecord(&w, len(o.Name))
	copy(raw[events.LinkObjectWireSize:], o.Name)
	return step{raw: raw}
}

// unmappedLibrary is a shared object this process does not map, and its
// executable segment's address: its parent's modules cannot place a pc
// there.
func unmappedLibrary(t *testing.T) (string, uint64) {
	maps, err := procfs.Maps(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1",
		"/lib/x86_64-linux-gnu/libm.so.6", "/lib64/ld-linux-x86-64.so.2"} {
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil {
			continue
		}
		mapped := false
		for _, m := range maps {
			mapped = mapped || m.Inode == st.Ino
		}
		ef, err := elf.Open(p)
		if mapped || err != nil {
			continue
		}
		defer ef.Close()
		for _, pr := range ef.Progs {
			if pr.Type == elf.PT_LOAD && pr.Flags&elf.PF_X != 0 && pr.Memsz > 64 {
				return p, pr.Vaddr + 32
			}
		}
	}
	t.Skip("no shared object this process does not map")
	return "", 0
}

// A worker forked by a live process maps a library its parent does not,
// allocates in it, and is gone before tttrace reads its records: its
// stack is placed in the objects of its link map BPF sent at the dlopen
// (the file found by its identity through its parent's root), not given
// up as pc_not_in_maps. A walk with a record lost is not used: the site
// then says why.
func TestRunSiteFromLinkMap(t *testing.T) {
	lib, vaddr := unmappedLibrary(t)
	var st unix.Stat_t
	if err := unix.Stat(lib, &st); err != nil {
		t.Fatal(err)
	}
	const bias = 0x7e0000000000
	ip := bias + vaddr
	libObj := stacks.LoadedObject{Bias: bias, Dev: st.Dev, Ino: st.Ino, Name: lib}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(exe, &st); err != nil {
		t.Fatal(err)
	}
	mainObj := stacks.LoadedObject{Dev: st.Dev, Ino: st.Ino} // its bias does not matter here
	for _, lose := range []bool{false, true} {
		t.Run(fmt.Sprintf("lose=%v", lose), func(t *testing.T) {
			parent, child := uint32(os.Getpid()), uint32(goneP)
			pip := uint64(reflect.ValueOf(TestRunSiteFromLinkMap).Pointer())
			h := newFakeHost()
			h.child = int(parent)
			pa := alloc(parent, 0xa1, 0, events.DRAM, 0x10000, 4096)
			pa.rec.Stack = events.StackFollows
			ca := alloc(child, 0xc1, 0, events.DRAM, 0x20000, 4096)
			ca.rec.Stack = events.StackFollows
			seq++
			walk := []step{
				linkObjStep(seq, child, 0, 0, mainObj),
				linkObjStep(seq, child, 1, events.LinkObjectNoFile, stacks.LoadedObject{Name: "linux-vdso.so.1"}),
				linkObjStep(seq, child, 2, events.LinkObjectLast, libObj),
			}
			if lose {
				walk = append(walk[:1], walk[2])
			}
			script := []step{pa, stackRec(pa.rec.Hdr.Seq, parent, pip), fork(parent, child)}
			script = append(script, walk...)
			script = append(script, linkMap(child), ca, stackRec(ca.rec.Hdr.Seq, child, ip), groupExit(child), idle, idle,
				do(h.end(int(parent), 0, 0)))
			be := newFakeBackend(script...)
			sum := runFollowedSummary(t, be, h)
			var p *devices.ProcessSummary
			for i := range sum.Processes {
				if sum.Processes[i].Pid == child {
					p = &sum.Processes[i]
				}
			}
			if p == nil || len(p.Leaks) != 1 {
				t.Fatalf("child's summary: %+v", p)
			}
			if lose {
				// Its parent's modules were dropped at its link-map
				// change (it may have exec'ed), its own never read.
				if p.Leaks[0].SiteMissing != "process_ended_before_maps" {
					t.Errorf("a walk with a record lost: leak site_missing %q, want process_ended_before_maps", p.Leaks[0].SiteMissing)
				}
				return
			}
			if len(p.SitesMissing) != 0 || p.Leaks[0].SiteMissing != "" || len(p.Sites) != 1 {
				t.Fatalf("child: sites_missing %v, leaks %+v, sites %+v", p.SitesMissing, p.Leaks, p.Sites)
			}
			if s := p.Sites[0]; len(s.Native) == 0 || s.Native[0].PC != ip || s.Native[0].Module != lib {
				t.Errorf("child's site %+v: its first frame is not at %#x in %s", s, ip, lib)
			}
		})
	}
}

// The main program of a worker whose parent has ended too (nothing in
// /proc to open it through) is found by the path it was executed by,
// which BPF sends as its name: its stack is placed in it.
func TestRunSiteMainFromLinkMap(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(exe, &st); err != nil {
		t.Fatal(err)
	}
	maps, err := procfs.Maps(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	low := ^uint64(0)
	for _, m := range maps {
		if m.Inode == st.Ino && m.Offset == 0 && m.Start < low {
			low = m.Start
		}
	}
	ef, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	var first uint64
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD {
			first = p.Vaddr &^ 4095
			break
		}
	}
	ef.Close()
	mainObj := stacks.LoadedObject{Bias: low - first, Dev: st.Dev, Ino: st.Ino, Name: exe}

	parent, child := uint32(goneP+1), uint32(goneP)
	ip := uint64(reflect.ValueOf(TestRunSiteMainFromLinkMap).Pointer())
	h := newFakeHost()
	h.child = int(parent)
	ca := alloc(child, 0xc1, 0, events.DRAM, 0x20000, 4096)
	ca.rec.Stack = events.StackFollows
	seq++
	be := newFakeBackend(fork(parent, child),
		linkObjStep(seq, child, 0, events.LinkObjectLast|events.LinkObjectExecfn, mainObj), linkMap(child),
		ca, stackRec(ca.rec.Hdr.Seq, child, ip), groupExit(child), idle, idle, do(h.end(int(parent), 0, 0)))
	sum := runFollowedSummary(t, be, h)
	for _, p := range sum.Processes {
		if p.Pid != child {
			continue
		}
		if len(p.SitesMissing) != 0 || len(p.Sites) != 1 {
			t.Fatalf("child: sites_missing %v, sites %+v", p.SitesMissing, p.Sites)
		}
		if s := p.Sites[0]; len(s.Native) == 0 || s.Native[0].PC != ip || s.Native[0].Module != exe {
			t.Errorf("child's site %+v: its first frame is not at %#x in %s", s, ip, exe)
		}
		return
	}
	t.Fatalf("no summary of the child: %+v", sum.Processes)
}

// A child that ends before its fork record is read, of a parent
// registered before the fork, has its Python stacks read with its
// parent's interpreter (BPF walked them with a copy of the parent's
// registration); not closed with the child. Forked before the parent's
// registration, it has it from the registration on.
func TestInheritPython(t *testing.T) {
	be := newFakeBackend()
	a := &allocSites{on: true, log: io.Discard, be: be, cache: stacks.NewCache(), procs: map[uint32]*procStacks{}}
	parent := uint32(goneP + 1)
	pp := a.procStacksOf(parent)
	pp.py, pp.pyAt = &pyframes.Process{}, 1000
	pp.pyInfo = &devices.PythonInfo{Version: "3.11", Supported: true}

	a.inherit(goneP, parent, 2000)
	ps := a.procs[goneP]
	if ps.py != pp.py || !ps.pyShared || ps.pyAt != 2000 || ps.pyInfo == pp.pyInfo || ps.pyInfo.Version != "3.11" {
		t.Fatalf("forked after the registration: py %p shared %v at %d info %+v", ps.py, ps.pyShared, ps.pyAt, ps.pyInfo)
	}
	if py := a.ended(goneP); py != nil {
		t.Error("the parent's interpreter was handed back to be closed with the child")
	}

	// Forked before the registration: BPF gave it a copy of its parent's
	// at its first capture after it (bpf/pyheir.h), not before.
	a.inherit(goneP+2, parent, 500)
	if ps := a.procs[goneP+2]; ps.py != pp.py || !ps.pyShared || ps.pyAt != 1000 {
		t.Errorf("forked before the registration: py %p shared %v at %d, want the parent's from its registration (1000)", ps.py, ps.pyShared, ps.pyAt)
	}
}
