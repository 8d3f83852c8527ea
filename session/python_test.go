package session

import (
	"io"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/pyframes"
	"github.com/tttrace/tttrace/stacks"
)

// A child forked before its parent's interpreter was registered, and ended
// before it could be read itself, keeps its parent's interpreter from the
// parent's registration on (BPF took a copy of it at the child's first
// capture after it: bpf/pyheir.h), whether its fork record was read
// before the registration (heirs) or after (inherit); a child forked by an
// earlier process with the parent's pid gets nothing of the new one.
func TestPythonHeirs(t *testing.T) {
	const parent, before, after, older = goneP, goneP + 1, goneP + 2, goneP + 3
	a := &allocSites{on: true, log: io.Discard, cache: stacks.NewCache(), procs: map[uint32]*procStacks{}}
	// A child of an earlier incarnation of the parent's pid.
	a.procStacksOf(older).forker = &procStacks{}
	a.procStacksOf(older).parent = parent
	pp := a.procStacksOf(parent)
	a.inherit(before, parent, 500)
	if ps := a.procs[before]; ps.py != nil || ps.forker != pp {
		t.Fatalf("a child of an unregistered parent: interpreter %v, forker %p (want %p)", ps.py, ps.forker, pp)
	}
	// The parent is registered (findPython's last steps).
	pp.py, pp.pyInfo, pp.pyAt = &pyframes.Process{}, &devices.PythonInfo{Version: "3.11.7", Supported: true}, 1000
	a.heirs(parent, pp)
	a.inherit(after, parent, 2000)
	for _, c := range []struct {
		pid uint32
		at  uint64
	}{{before, 1000}, {after, 2000}} {
		ps := a.procs[c.pid]
		if ps.py != pp.py || !ps.pyShared || ps.pyAt != c.at || ps.pyInfo == nil || ps.pyInfo.Version != "3.11.7" {
			t.Errorf("pid %d: interpreter %p shared %v at %d, info %+v; want the parent's %p, shared, at %d", c.pid, ps.py, ps.pyShared, ps.pyAt, ps.pyInfo, pp.py, c.at)
		}
		if ps.pyInfo == pp.pyInfo {
			t.Errorf("pid %d shares its parent's PythonInfo (each process's summary has its own)", c.pid)
		}
	}
	if ps := a.procs[older]; ps.py != nil {
		t.Error("a child of an earlier process with the parent's pid got the new one's interpreter")
	}
}

// A child takes its parent's last link-map walk at its fork, and keeps it
// only until its own link map changes: its next link-map record brings its
// own walk, or, if that one did not come whole, leaves it none.
func TestForkWalk(t *testing.T) {
	const parent, child, other = goneP, goneP + 1, goneP + 2
	a := &allocSites{on: true, log: io.Discard, cache: stacks.NewCache(), procs: map[uint32]*procStacks{}}
	pw := &linkWalk{done: true}
	a.procStacksOf(parent).walk = pw
	a.inherit(child, parent, 10)
	a.inherit(other, parent, 20)
	if a.procs[child].walk != pw || a.procs[other].walk != pw {
		t.Fatal("a child has not its parent's walk")
	}
	a.takeWalk(child, true) // a link-map record without a whole walk
	if a.procs[child].walk != nil {
		t.Error("a child whose link map changed kept its parent's walk")
	}
	a.walks.pending = map[uint32]*linkWalk{other: {done: true}}
	own := a.walks.pending[other]
	a.takeWalk(other, true)
	if a.procs[other].walk != own {
		t.Error("a child's own walk did not replace its parent's")
	}
	a.takeWalk(parent, true)
	if a.procs[parent].walk != pw {
		t.Error("the parent lost its walk to a record without one")
	}
}
