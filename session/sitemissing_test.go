package session

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/procfs"
	"github.com/tttrace/tttrace/sinks"
	"github.com/tttrace/tttrace/stacks"
)

// goneP is a pid no process can have (above the kernel's pid_max limit):
// a process that ended before tttrace read anything of it.
const goneP = 1 << 30

// An alloc whose site cannot be made says why, never nothing: a stack of a
// process whose maps cannot be read (it is gone) and a stack lost in BPF
// each give the alloc's line and its leak a site_missing reason, and the
// summary and the report count them. (A stack that never comes:
// TestHeldGivenUp.)
func TestRunSiteMissing(t *testing.T) {
	pid := uint32(goneP)
	ip := uint64(reflect.ValueOf(TestRunSiteMissing).Pointer())
	h := newFakeHost()
	h.child = int(pid)
	ended := alloc(pid, 0xb1, 0, events.DRAM, 0x20000, 4096)
	ended.rec.Stack = events.StackFollows
	lost := alloc(pid, 0xb2, 0, events.DRAM, 0x30000, 4096)
	lost.rec.Stack = events.StackLost
	be := newFakeBackend(ended, stackRec(ended.rec.Hdr.Seq, pid, ip), lost, do(h.end(int(pid), 0, 0)))
	be.attach["/opt/tt/libtt_metal.so"] = nil
	r := &recorder{}
	var nd, report bytes.Buffer
	cfg := Config{Command: []string{"workload"}, Lib: "/opt/tt/libtt_metal.so"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := run(ctx, cfg, be, h, []sinks.Sink{r, sinks.NewNDJSON(&nd, false), sinks.NewReport(&report)}); err != nil {
		t.Fatal(err)
	}
	want := map[uint64]string{
		ended.rec.Hdr.Seq: "process_ended_before_maps",
		lost.rec.Hdr.Seq:  "stack_lost",
	}
	got := map[uint64]string{}
	var sum devices.Summary
	for _, l := range strings.Split(strings.TrimSpace(nd.String()), "\n") {
		if strings.HasPrefix(l, `{"type":"summary"`) {
			if err := json.Unmarshal([]byte(l), &sum); err != nil {
				t.Fatal(err)
			}
		}
		var a struct {
			Type        string `json:"type"`
			Seq         uint64 `json:"seq"`
			Site        uint32 `json:"site"`
			SiteMissing string `json:"site_missing"`
		}
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatal(err)
		}
		if a.Type != "alloc" {
			continue
		}
		if a.Site != 0 {
			t.Errorf("alloc seq %d has site %d: no site can be made", a.Seq, a.Site)
		}
		got[a.Seq] = a.SiteMissing
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("site_missing by alloc seq %v, want %v\n%s", got, want, nd.String())
	}
	if len(sum.Processes) != 1 {
		t.Fatalf("summary: %d processes", len(sum.Processes))
	}
	p := sum.Processes[0]
	if w := map[string]uint64{"process_ended_before_maps": 1, "stack_lost": 1}; !reflect.DeepEqual(p.SitesMissing, w) ||
		!reflect.DeepEqual(r.summary.Processes[0].SitesMissing, w) {
		t.Errorf("sites_missing %v (in the sinks' summary %v), want %v", p.SitesMissing, r.summary.Processes[0].SitesMissing, w)
	}
	if len(p.Leaks) != 2 {
		t.Fatalf("leaks %+v, want 2", p.Leaks)
	}
	for _, lk := range p.Leaks {
		if lk.SiteMissing != want[lk.Seq] {
			t.Errorf("leak seq %d: site_missing %q, want %q", lk.Seq, lk.SiteMissing, want[lk.Seq])
		}
	}
	if w := "2 allocation(s) without a site: process_ended_before_maps 1, stack_lost 1"; !strings.Contains(report.String(), w) {
		t.Errorf("the report does not say %q:\n%s", w, report.String())
	}
}

// runFollowedSummary runs a followed command on be and h, its TT-Metal at
// /opt/tt/libtt_metal.so, and returns the summary its NDJSON ends with.
func runFollowedSummary(t *testing.T, be *fakeBackend, h *fakeHost) devices.Summary {
	t.Helper()
	be.attach["/opt/tt/libtt_metal.so"] = nil
	r := &recorder{}
	var nd bytes.Buffer
	cfg := Config{Command: []string{"workload"}, Follow: true, Lib: "/opt/tt/libtt_metal.so"}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := run(ctx, cfg, be, h, []sinks.Sink{r, sinks.NewNDJSON(&nd, false)}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(nd.String()), "\n")
	var sum devices.Summary
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil {
		t.Fatal(err)
	}
	return sum
}

// A child forked by a live process, whose stack is read after it ended:
// it is placed in its parent's modules, as of the fork (the same
// mappings), not given up.
func TestRunSiteForkedChildEnded(t *testing.T) {
	parent, child := uint32(os.Getpid()), uint32(goneP)
	ip := uint64(reflect.ValueOf(TestRunSiteForkedChildEnded).Pointer())
	h := newFakeHost()
	h.child = int(parent)
	pa := alloc(parent, 0xa1, 0, events.DRAM, 0x10000, 4096)
	pa.rec.Stack = events.StackFollows
	ca := alloc(child, 0xc1, 0, events.DRAM, 0x20000, 4096)
	ca.rec.Stack = events.StackFollows
	be := newFakeBackend(
		pa, stackRec(pa.rec.Hdr.Seq, parent, ip),
		fork(parent, child),
		ca, stackRec(ca.rec.Hdr.Seq, child, ip), groupExit(child), idle, idle,
		do(h.end(int(parent), 0, 0)),
	)
	sum := runFollowedSummary(t, be, h)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var seen bool
	for _, p := range sum.Processes {
		if p.Pid != child {
			continue
		}
		seen = true
		if len(p.SitesMissing) != 0 || len(p.Leaks) != 1 || p.Leaks[0].SiteMissing != "" || len(p.Sites) != 1 {
			t.Fatalf("child: sites_missing %v, leaks %+v, sites %+v", p.SitesMissing, p.Leaks, p.Sites)
		}
		if s := p.Sites[0]; len(s.Native) == 0 || s.Native[0].PC != ip || s.Native[0].Module != exe {
			t.Errorf("child's site %+v: not placed in its parent's modules (%s)", s, exe)
		}
	}
	if !seen {
		t.Fatalf("no summary of the child: %+v", sum.Processes)
	}
}

func TestIsPythonFile(t *testing.T) {
	for path, want := range map[string]bool{
		"/usr/bin/python3.11": true, "/root/.pyenv/versions/3.12.1/lib/libpython3.12.so.1.0": true,
		"/usr/bin/python3": true, "/usr/bin/python": true, "/usr/bin/python3-config": false,
		"/opt/tt/libtt_metal.so": false, "/usr/lib/libc.so.6": false, "/usr/bin/pythonista": false,
	} {
		if got := isPythonFile(path); got != want {
			t.Errorf("isPythonFile(%s) = %v, want %v", path, got, want)
		}
	}
}

// The Python frames a site must have: a native stack through the
// interpreter with no Python stack says why, by when the interpreter was
// registered.
func TestPythonMissing(t *testing.T) {
	ps := &procStacks{}
	ps.facts = map[stacks.StackID]stackFacts{1: {python: true}, 2: {}}
	if m := ps.pythonMissing(2, 0, 10); m != events.SiteComplete {
		t.Errorf("a stack outside the interpreter: %v", m)
	}
	if m := ps.pythonMissing(1, 0, 10); m != events.MissingPythonNotRegistered {
		t.Errorf("not registered: %v", m)
	}
	ps.pyInfo = &devices.PythonInfo{Error: "only 3.10 to 3.13"}
	if m := ps.pythonMissing(1, 0, 10); m != events.MissingPythonUnsupported {
		t.Errorf("unsupported: %v", m)
	}
}

// pyenvShim finds the interpreter a pyenv shim runs as pyenv does: the
// shell's PYENV_VERSION, else the nearest .python-version, else the global
// version file; nothing for a file that is no shim.
func TestPyenvShim(t *testing.T) {
	root := t.TempDir()
	shim := filepath.Join(root, "shims", "python3")
	for _, d := range []string{"shims", "versions/3.11.7/bin", "versions/3.12.1/bin", "work/sub"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(p, s string) {
		if err := os.WriteFile(filepath.Join(root, p), []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("shims/python3", "#!/usr/bin/env bash\nexec \"/x/pyenv/libexec/pyenv\" exec \"$program\" \"$@\"\n")
	write("shims/other", "#!/bin/sh\nexec /usr/bin/python3 \"$@\"\n")
	write("versions/3.11.7/bin/python3", "elf")
	write("versions/3.12.1/bin/python3", "elf")
	write("version", "3.11.7\n")
	env := map[string]string{"PYENV_ROOT": root}
	getenv := func(k string) string { return env[k] }
	work := filepath.Join(root, "work", "sub")
	v := func(ver string) string { return filepath.Join(root, "versions", ver, "bin", "python3") }
	if got := pyenvShim(shim, getenv, work); got != v("3.11.7") {
		t.Errorf("global version: %q", got)
	}
	write("work/.python-version", "3.12.1\n")
	if got := pyenvShim(shim, getenv, work); got != v("3.12.1") {
		t.Errorf(".python-version above the directory: %q", got)
	}
	env["PYENV_VERSION"] = "3.9.0:3.11.7"
	if got := pyenvShim(shim, getenv, work); got != v("3.11.7") {
		t.Errorf("PYENV_VERSION, its first version missing: %q", got)
	}
	env["PYENV_VERSION"] = "system"
	if got := pyenvShim(shim, getenv, work); got != "" {
		t.Errorf("system: %q", got)
	}
	if got := pyenvShim(filepath.Join(root, "shims", "other"), getenv, work); got != "" {
		t.Errorf("not a pyenv shim: %q", got)
	}
	if got := pyenvShim(v("3.11.7"), getenv, work); got != "" {
		t.Errorf("an interpreter itself: %q", got)
	}
}

// Files are warmed for symbolizing only when a sink describes sites as
// they come: with none (--no-events, the report) nothing is described
// before the end, and a warm-up would hold every file's symbols and DWARF
// through the run (row 5 of make bench: +20 MB at 1M live buffers).
func TestWarmOnlyForSiteSinks(t *testing.T) {
	a := &allocSites{on: true, cache: stacks.NewCache(), ttMetal: func(procfs.FileKey) bool { return true }}
	mods, err := a.cache.Snapshot(os.Getpid())
	if err != nil || len(mods.Files()) == 0 {
		t.Fatalf("this process's modules: %v", err)
	}
	a.warmFiles(mods)
	if len(a.warmed) != 0 {
		t.Errorf("no site sink: %d files warmed", len(a.warmed))
	}
	var nd bytes.Buffer
	a.sinks = []sinks.SiteSink{sinks.NewNDJSON(&nd, false)}
	a.warmFiles(mods)
	warming.Wait()
	if len(a.warmed) != len(mods.Files()) {
		t.Errorf("NDJSON with events: %d of %d files warmed", len(a.warmed), len(mods.Files()))
	}
}
