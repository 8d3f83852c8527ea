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
