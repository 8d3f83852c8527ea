package main

// End-to-end tests on the builds of TT-Metal a user meets (replica variants,
// Makefile REPLICA_VARIANTS): gcc and clang, -O2 and -O3, DWARF in the
// library (zstd-compressed), in a separate debug file, or none, .symtab
// stripped, the V0, V1, V2 and an unknown layout, tracker calls inlined
// (lifecycle probe plan) with allocate_impl and deallocate inlined too. For
// each: tttrace doctor's findings, checked against readelf, nm and objdump
// and the layout the variant was built with, and a representative set of
// scenarios traced and compared with the replica's ground truth field for
// field. The unknown layout must be refused, naming what was checked.

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// layoutWant is a layout as the replica builds it (testdata/replica
// buffer.hpp), independent of tttrace's profiles.
type layoutWant struct {
	ImplPtr, Device, Size, Type, OwnsData, Status, Hooked, Address, PageSize, DeviceID, Allocated int64
}

var (
	replicaV1      = layoutWant{-1, 16, 24, 32, 43, 72, 73, 80, 88, 8, 1}
	replicaV0      = layoutWant{-1, 0, 8, 16, 27, 56, 57, 64, 72, 8, 2}
	replicaV2      = layoutWant{16, 0, 8, 16, 27, 56, 57, 64, 72, 8, 1}
	replicaUnknown = layoutWant{-1, 48, 56, 40, 34, 32, 33, 16, 24, 8, 1}
)

// variantCase is what one replica build must give.
type variantCase struct {
	name   string
	plan   string     // the probe plan tttrace must choose
	from   string     // where the layout must come from (substring of doctor's "from")
	layout layoutWant // the offsets tttrace must find
	// noHooked: the layout source cannot give hooked_allocation_ (V0 profile):
	// tracing is not exact under graph capture and doctor must say so.
	noHooked bool
	// inlined: functions doctor must report as inlined (program names).
	inlined []string
	// attached: programs that must be in the plan besides the usual ones.
	attached []string
	// typeWidth: the bytes of buffer_type_ (0: 4, an int enum); corrected:
	// the profile said otherwise and the library's code corrected it.
	typeWidth int64
	corrected bool
	// placed: every entry probe must sit below an endbr64, on an
	// instruction the kernel emulates.
	placed    bool
	scenarios []run
}

var variantCases = []variantCase{
	{name: "gcc-O2", plan: "tracker", from: "built-in profile V1", layout: replicaV1,
		scenarios: []run{
			// Buffer's lifecycle probes on a build where the tracker is called: the
			// two plans must agree.
			{mode: "cmd", scenario: "basic", args: []string{"--leak"}, peaks: true, flags: []string{"--probes", "lifecycle"}},
			{mode: "cmd", scenario: "close", args: []string{"--leak"}, peaks: true, flags: []string{"--probes", "lifecycle"}},
			{mode: "cmd", scenario: "capture", args: []string{"--leak"}, peaks: true, flags: []string{"--probes", "lifecycle"}},
		}},
	{name: "gcc-O3-dwarf-zstd", plan: "tracker", from: "DWARF of", layout: replicaV1, scenarios: basicSet()},
	{name: "clang-O2-symtab", plan: "tracker", from: "built-in profile V1", layout: replicaV1, scenarios: basicSet()},
	{name: "clang-O3", plan: "tracker", from: "built-in profile V1", layout: replicaV1,
		inlined:   []string{"deallocate_circular_buffers"},
		scenarios: append(basicSet(), run{mode: "cmd", scenario: "cb_legacy", args: []string{"--leak"}, peaks: true})},
	{name: "clang-O3-debuglink", plan: "tracker", from: ".debug/libtt_metal.so.debug", layout: replicaV1,
		inlined: []string{"deallocate_circular_buffers"},
		scenarios: []run{{mode: "cmd", scenario: "basic", args: []string{"--leak"}, peaks: true},
			{mode: "cmd", scenario: "mesh", args: []string{"--leak"}, peaks: true}}},
	{name: "v0-gcc-O2", plan: "tracker", from: "built-in profile V0", layout: withHooked(replicaV0, -1), noHooked: true,
		scenarios: basicSet()},
	{name: "v0-clang-O3-dwarf", plan: "tracker", from: "DWARF of", layout: replicaV0,
		inlined:   []string{"deallocate_circular_buffers"},
		scenarios: append(basicSet(), run{mode: "cmd", scenario: "capture", args: []string{"--leak"}, peaks: true})},
	{name: "v2-gcc-O2-symtab", plan: "tracker", from: "built-in profile V2", layout: replicaV2,
		scenarios: append(basicSet(), run{mode: "cmd", scenario: "capture", args: []string{"--leak"}, peaks: true})},
	{name: "v2-clang-O3", plan: "tracker", from: "built-in profile V2", layout: replicaV2,
		inlined: []string{"deallocate_circular_buffers"}, scenarios: basicSet()},
	{name: "inline-gcc-O2", plan: "lifecycle", from: "built-in profile V1", layout: replicaV1,
		scenarios: append(basicSet(),
			run{mode: "cmd", scenario: "close", args: []string{"--leak"}, peaks: true},
			run{mode: "cmd", scenario: "capture", args: []string{"--leak"}, peaks: true},
			run{mode: "cmd", scenario: "threads", args: []string{"--leak", "--threads", "4", "--seed", "3"}},
			run{mode: "pid", scenario: "oom", peaks: true},
			// Peaks not compared: "all" has threads, and the lifecycle plan sees a
			// free at deallocate_impl's entry, before the allocator's lock, so
			// frees of one thread and allocations of another can be seen in
			// another order than the allocator made them (totals are exact).
			run{mode: "python", scenario: "all", args: []string{"--leak"}})},
	{name: "inline-clang-O3", plan: "lifecycle", from: "built-in profile V1", layout: replicaV1,
		inlined:  []string{"lc_alloc_enter", "deallocate_circular_buffers"},
		attached: []string{"lc_create_exit", "lc_free_owned"},
		scenarios: append(basicSet(),
			run{mode: "cmd", scenario: "close", args: []string{"--leak"}, peaks: true},
			run{mode: "cmd", scenario: "concurrent", args: []string{"--leak", "--threads", "4", "--seed", "5"}})},
	{name: "inline-gcc-O3-symtab", plan: "lifecycle", from: "built-in profile V1", layout: replicaV1,
		// gcc -O3 inlines ~Buffer() into the shared_ptr control block's
		// _M_dispose(): that is where frees are probed.
		inlined: []string{"lc_alloc_enter"}, attached: []string{"lc_free_dispose", "lc_create_exit"},
		scenarios: append(basicSet(),
			run{mode: "cmd", scenario: "threads", args: []string{"--leak", "--threads", "4", "--seed", "9"}})},
	{name: "unknown-gcc-O2-dwarf", plan: "tracker", from: "DWARF of", layout: replicaUnknown, scenarios: basicSet()},
	// A one-byte BufferType with garbage in the padding after it: read at
	// the width the library's code reads (movzx of a byte in
	// Buffer::buffer_type() const), which corrects the V2 profile, or at the
	// width of the DWARF member type.
	{name: "v2-u8-gcc-O2", plan: "tracker", from: "built-in profile V2", layout: replicaV2, typeWidth: 1, corrected: true,
		scenarios: basicSet()},
	{name: "u8-gcc-O2-dwarf", plan: "tracker", from: "DWARF of", layout: replicaV1, typeWidth: 1, scenarios: basicSet()},
	// The same without DWARF, non-pimpl, buffer_type() inline: the width
	// comes from the out-of-line Buffer::is_trace(), is_dram() and is_l1()
	// (cmp BYTE PTR), which corrects the V1 profile's int.
	{name: "u8-gcc-O2", plan: "tracker", from: "built-in profile V1", layout: replicaV1, typeWidth: 1, corrected: true,
		scenarios: basicSet()},
	// The 2026 pimpl-2 design: the lifecycle in BufferImpl (allocate_impl(Buffer&), ...),
	// Buffer::create forwarding to BufferImpl::create, notify_buffer_* after track_*: the
	// tracker plan, exact (TestE2EPimpl2LifecycleRefused: the lifecycle plan is refused).
	// CoreRangeSet is in tt::tt_metal, as 2026 declares it (CORE_NS=1): track_allocate_cb is
	// found by its other mangling, and the CBs (cb, and resident per core in cb_cache) are
	// exact.
	{name: "v2-pimpl2-gcc-O2", plan: "tracker", from: "built-in profile V2", layout: replicaV2,
		scenarios: append(basicSet(), run{mode: "cmd", scenario: "close", args: []string{"--leak"}, peaks: true},
			run{mode: "cmd", scenario: "capture", args: []string{"--leak"}, peaks: true},
			run{mode: "cmd", scenario: "cb_cache", args: []string{"--leak"}, peaks: true})},
	// -fcf-protection=full: every function starts with endbr64, which the
	// kernel single-steps; entry probes move to the first instruction of
	// the prologue it emulates (push, or the je after a test of the
	// argument), and the ledger stays exact, in both plans (the lifecycle
	// plan pairs entries and exits by the stack pointer).
	{name: "cet-gcc-O2", plan: "tracker", from: "built-in profile V1", layout: replicaV1, placed: true,
		scenarios: append(basicSet(), run{mode: "cmd", scenario: "close", args: []string{"--leak"}, peaks: true},
			run{mode: "pid", scenario: "threads", args: []string{"--leak", "--threads", "3", "--seed", "4"}})},
	{name: "inline-cet-clang-O3", plan: "lifecycle", from: "built-in profile V1", layout: replicaV1, placed: true,
		inlined: []string{"lc_alloc_enter", "deallocate_circular_buffers"}, attached: []string{"lc_create_exit", "lc_free_owned"},
		scenarios: append(basicSet(), run{mode: "cmd", scenario: "close", args: []string{"--leak"}, peaks: true})},
}

// basicSet is the representative subset every variant runs: allocations and
// frees with leaks, out-of-memory exceptions through the probed functions
// (the traced process must survive them), mesh buffers, circular buffers.
func basicSet() []run {
	return []run{
		{mode: "cmd", scenario: "basic", args: []string{"--leak"}, peaks: true},
		{mode: "cmd", scenario: "oom", args: []string{"--leak"}, peaks: true},
		{mode: "cmd", scenario: "mesh", args: []string{"--leak"}, peaks: true},
		{mode: "cmd", scenario: "cb", args: []string{"--leak"}, peaks: true},
	}
}

func withHooked(l layoutWant, hooked int64) layoutWant {
	l.Hooked = hooked
	return l
}

var variantBuild sync.Mutex

// variantDir returns the directory of replica variant name, building it
// with the Makefile's rule when absent.
func variantDir(t *testing.T, name string) string {
	t.Helper()
	_, replica := setup(t)
	dir := filepath.Join(replica, name)
	variantBuild.Lock()
	defer variantBuild.Unlock()
	if _, err := os.Stat(filepath.Join(dir, "libtt_metal.so")); err == nil {
		return dir
	}
	abs, err := filepath.Abs(replica)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("make", "-s", "-C", "../..", "REPLICA="+abs, filepath.Join(abs, name, "libtt_metal.so")).CombinedOutput()
	if err != nil {
		t.Fatalf("build replica variant %s: %v\n%s", name, err, out)
	}
	return dir
}

// doctorJSON is the part of "tttrace doctor --json" the tests read.
type doctorJSON struct {
	Library *struct {
		Path    string `json:"path"`
		BuildID string `json:"build_id"`
		Symtab  bool   `json:"symtab"`
		DWARF   bool   `json:"dwarf"`
		V0      bool   `json:"v0_namespace"`
		Pimpl   bool   `json:"pimpl_accessors"`
	} `json:"library"`
	Layout *struct {
		Layout struct {
			ImplPtr   int64 `json:"buffer_impl_ptr"`
			Device    int64 `json:"device"`
			Size      int64 `json:"size"`
			Type      int64 `json:"buffer_type"`
			OwnsData  int64 `json:"owns_data"`
			Status    int64 `json:"allocation_status"`
			Hooked    int64 `json:"hooked_allocation"`
			Address   int64 `json:"address"`
			PageSize  int64 `json:"page_size"`
			DeviceID  int64 `json:"device_id"`
			Allocated int64 `json:"allocated_value"`
			TypeWidth int64 `json:"buffer_type_width"`
		} `json:"layout"`
		From        string   `json:"from"`
		Checked     []string `json:"checked"`
		Corrections []string `json:"corrections"`
		Fields      []struct {
			Field    string `json:"field"`
			Value    int64  `json:"value"`
			Verified bool   `json:"verified"`
			How      string `json:"how"`
		} `json:"fields"`
	} `json:"layout"`
	Plan *struct {
		Kind   string `json:"kind"`
		Points []struct {
			Program  string `json:"program"`
			Function string `json:"function"`
			Symbol   string `json:"symbol"`
			Addr     uint64 `json:"addr"`
			Insn     string `json:"insn"`
			Status   string `json:"status"`
		} `json:"points"`
		Exact   bool           `json:"exact"`
		Caveats []string       `json:"caveats"`
		Notes   []string       `json:"notes"`
		Calls   map[string]int `json:"call_sites"`
	} `json:"plan"`
	Kernel []struct {
		Name   string `json:"name"`
		OK     bool   `json:"ok"`
		Needed bool   `json:"needed"`
	} `json:"kernel"`
	Traceable bool   `json:"traceable"`
	Exact     bool   `json:"exact"`
	Error     string `json:"error"`
	Verdict   string `json:"verdict"`
}

// doctor runs "tttrace doctor --json" and returns its report and exit status.
func doctor(t *testing.T, args ...string) (*doctorJSON, int, string) {
	t.Helper()
	bin, _ := setup(t)
	cmd := exec.Command(bin, append([]string{"doctor", "--json"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("tttrace doctor: %v", err)
	}
	var rep doctorJSON
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("doctor --json is not JSON: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	return &rep, code, stdout.String()
}

// checkDoctor compares doctor's findings on variant v with the tools of
// binutils and with how the variant was built.
func checkDoctor(t *testing.T, v variantCase, lib string) {
	rep, code, raw := doctor(t, lib)
	if code != 0 || !rep.Traceable {
		t.Fatalf("doctor %s: exit %d, traceable %v: %s", v.name, code, rep.Traceable, rep.Error)
	}
	// Build-id: as readelf reads it.
	out, err := exec.Command("readelf", "-n", lib).Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`Build ID: ([0-9a-f]+)`).FindSubmatch(out)
	if m == nil || rep.Library.BuildID != string(m[1]) {
		t.Errorf("build-id %q, readelf says %q", rep.Library.BuildID, m)
	}
	// Layout: from the expected source, with the offsets the variant has.
	if !strings.Contains(rep.Layout.From, v.from) {
		t.Errorf("layout from %q, want it from %q", rep.Layout.From, v.from)
	}
	l := rep.Layout.Layout
	got := layoutWant{l.ImplPtr, l.Device, l.Size, l.Type, l.OwnsData, l.Status, l.Hooked, l.Address, l.PageSize, l.DeviceID, l.Allocated}
	if got != v.layout {
		t.Errorf("layout %+v, the variant is built with %+v", got, v.layout)
	}
	wantWidth := v.typeWidth
	if wantWidth == 0 {
		wantWidth = 4
	}
	if l.TypeWidth != wantWidth {
		t.Errorf("buffer_type_ width %d, the variant is built with %d", l.TypeWidth, wantWidth)
	}
	corr := strings.Join(rep.Layout.Corrections, " ")
	if v.corrected != strings.Contains(corr, "buffer_type_ is 1 byte(s) wide in the library's code, not 4") {
		t.Errorf("corrections %q: want the width correction said: %v", corr, v.corrected)
	}
	if v.corrected && !strings.Contains(rep.Layout.From, "corrected by the library's code") {
		t.Errorf("layout from %q: a corrected profile is not simply confirmed", rep.Layout.From)
	}
	// Every variant has DWARF or the out-of-line is_trace/is_dram/is_l1
	// (nm says which): doctor must say the width is verified, and how.
	dynsym, err := exec.Command("nm", "-D", "--defined-only", lib).Output()
	if err != nil {
		t.Fatal(err)
	}
	predicates := regexp.MustCompile(`Buffer8is_traceEv`).Match(dynsym)
	var width string
	for _, f := range rep.Layout.Fields {
		if f.Field == "buffer_type_width" {
			width = fmt.Sprintf("%d verified=%v: %s", f.Value, f.Verified, f.How)
			if f.Value != wantWidth || !f.Verified || predicates && !strings.Contains(f.How, "Buffer::is_trace() const") && !strings.Contains(f.How, "DWARF") {
				t.Errorf("doctor's width check %s; want %d, verified (is_trace in .dynsym: %v)", width, wantWidth, predicates)
			}
		}
	}
	if width == "" {
		t.Errorf("doctor says nothing of buffer_type_'s width: %+v", rep.Layout.Fields)
	}
	// Plan and attach points.
	if rep.Plan.Kind != v.plan {
		t.Errorf("plan %q, want %q (call sites %v)", rep.Plan.Kind, v.plan, rep.Plan.Calls)
	}
	if rep.Exact == v.noHooked {
		t.Errorf("exact = %v; want %v (verdict: %s)", rep.Exact, !v.noHooked, rep.Verdict)
	}
	if v.noHooked && !strings.Contains(strings.Join(rep.Plan.Caveats, " "), "hooked_allocation_") {
		t.Errorf("inexact without saying hooked_allocation_ is unknown: %v", rep.Plan.Caveats)
	}
	nm, err := exec.Command("nm", "-D", "--defined-only", lib).Output()
	if err != nil {
		t.Fatal(err)
	}
	symAddr := map[string]uint64{}
	for _, line := range strings.Split(string(nm), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 {
			a, _ := strconv.ParseUint(f[0], 16, 64)
			symAddr[f[2]] = a
		}
	}
	relocs, err := exec.Command("readelf", "-rW", lib).Output()
	if err != nil {
		t.Fatal(err)
	}
	status := map[string][]string{}
	exits := 0
	for _, p := range rep.Plan.Points {
		status[p.Program] = append(status[p.Program], p.Status)
		if p.Status != "attached" {
			continue
		}
		if vt, ok := strings.CutSuffix(p.Symbol, "[2]"); ok {
			// A function found through a vtable: slot 2's relocation
			// (readelf) must point at it.
			slot := symAddr[vt] + 16 + 2*8
			re := regexp.MustCompile(fmt.Sprintf(`(?m)^0*%x\s+\S+\s+R_X86_64_RELATIVE\s+([0-9a-f]+)`, slot))
			m := re.FindSubmatch(relocs)
			if m == nil || string(m[1]) != strconv.FormatUint(p.Addr, 16) {
				t.Errorf("%s: at %#x, but readelf says slot 2 of %s (%#x) holds %q", p.Program, p.Addr, vt, slot, m)
			}
			continue
		}
		if p.Program == "bank_manager_oom" {
			// Inside allocate_buffer, on the instruction that loads the
			// out-of-memory message (objdump's target, the bytes there).
			checkLoadsOOMMessage(t, lib, p.Addr)
			continue
		}
		name, _, isExit := strings.Cut(p.Symbol, "+")
		if a, ok := symAddr[name]; !ok {
			t.Errorf("%s: attached to %s, which nm -D does not list", p.Program, name)
		} else if !isExit && a != p.Addr {
			t.Errorf("%s: attached at %#x, nm -D says %s is at %#x", p.Program, p.Addr, name, a)
		} else if v.placed && !strings.HasSuffix(p.Program, "_exit") {
			checkPlaced(t, lib, p.Program, a, p.Addr)
		}
		if strings.HasSuffix(p.Program, "_exit") {
			exits++
			// The instruction objdump finds there is a ret or a jump out.
			d, err := exec.Command("objdump", "-d", "--no-show-raw-insn", fmt.Sprintf("--start-address=%#x", p.Addr),
				fmt.Sprintf("--stop-address=%#x", p.Addr+16), lib).Output()
			if err != nil {
				t.Fatal(err)
			}
			first := regexp.MustCompile(`(?m)^\s*[0-9a-f]+:\s+(\S+)`).FindSubmatch(d)
			if first == nil || !(bytes.HasPrefix(first[1], []byte("ret")) || bytes.HasPrefix(first[1], []byte("jmp")) ||
				bytes.HasPrefix(first[1], []byte("rep")) || bytes.HasPrefix(first[1], []byte("bnd"))) {
				t.Errorf("%s at %#x: objdump finds %q there, not a ret or jmp", p.Program, p.Addr, first)
			}
		}
	}
	if v.plan == "lifecycle" {
		for _, prog := range []string{"lc_free"} {
			if !contains(status[prog], "attached") {
				t.Errorf("lifecycle plan without %s attached: %v", prog, status)
			}
		}
		if exits == 0 {
			t.Error("lifecycle plan with no probe on an exit of allocate_impl or create")
		}
		if !contains(status["track_allocate"], "not needed") {
			t.Errorf("lifecycle plan: track_allocate is %v, want not needed", status["track_allocate"])
		}
	} else if !contains(status["track_allocate"], "attached") || !contains(status["track_deallocate"], "attached") {
		t.Errorf("tracker plan without the tracker attached: %v", status)
	}
	for _, prog := range v.inlined {
		if !contains(status[prog], "inlined") {
			t.Errorf("%s should be reported inlined: %v", prog, status[prog])
		}
	}
	for _, prog := range v.attached {
		if !contains(status[prog], "attached") {
			t.Errorf("%s should be attached: %v", prog, status[prog])
		}
	}
	checkKnownCallers(t, rep, lib, status)
	for _, f := range rep.Kernel {
		if f.Needed && !f.OK {
			t.Errorf("kernel feature %s reported missing on a kernel that traces", f.Name)
		}
	}
	if t.Failed() {
		t.Logf("doctor said:\n%s", raw)
	}
}

// Mangled-name patterns (in namespace v0 too) of the functions whose
// callers doctor checks.
const (
	reBufferView       = `_ZN2tt8tt_metal(?:2v0)?6Buffer4viewERKNS[01]_12BufferRegionE`
	reBufferCreateView = `_ZN2tt8tt_metal(?:2v0)?6Buffer6createEPNS[01]_7IDeviceEmmmNS[01]_10BufferTypeE`
	// CoreRangeSet global (RK12CoreRangeSet) or, 2026, in tt::tt_metal (RKNS0_12CoreRangeSetE).
	reTrackAllocateCB = `_ZN2tt8tt_metal(?:2v0)?12GraphTracker17track_allocate_cbERK(?:12CoreRangeSet|NS0_12CoreRangeSetE)mmbPKNS[01]_7IDeviceE`
	reAllocateCBs     = `_ZN2tt8tt_metal(?:2v0)?6detail11ProgramImpl25allocate_circular_buffersEPKNS[01]_7IDeviceE`
)

// objdumpCallers finds, with nm and objdump, whether lib defines the
// function matching caller, whether that function calls or jumps to one
// matching callee, and how many calls and jumps to callee the whole
// library has.
func objdumpCallers(t *testing.T, lib, caller, callee string) (present, calls bool, total int) {
	t.Helper()
	out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", lib).Output()
	if err != nil {
		t.Fatal(err)
	}
	branch := regexp.MustCompile(`\t(?:call|jmp)\s+[0-9a-f]+ <` + callee + `[^>]*>`)
	// A library without .symtab is disassembled with its .dynsym names
	// (name@@Base).
	head := regexp.MustCompile(`^[0-9a-f]+ <(` + caller + `)(?:@@Base)?>:$`)
	in := false
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasSuffix(line, ">:"):
			in = head.MatchString(line)
			present = present || in
		case branch.MatchString(line):
			total++
			calls = calls || in
		}
	}
	return present, calls, total
}

// checkKnownCallers: doctor says a probed function is inlined into a
// known caller exactly when objdump finds the caller without a call to it,
// and never says "inlined" of a function the library has a caller of.
func checkKnownCallers(t *testing.T, rep *doctorJSON, lib string, status map[string][]string) {
	said := strings.Join(append(append([]string(nil), rep.Plan.Caveats...), rep.Plan.Notes...), "\n")
	present, calls, _ := objdumpCallers(t, lib, reBufferView, reBufferCreateView)
	inlined := present && !calls
	if contains(status["buffer_create_view"], "inlined") != inlined {
		t.Errorf("buffer_create_view %v; objdump: Buffer::view present %v, calls Buffer::create(address) %v",
			status["buffer_create_view"], present, calls)
	}
	if inlined != strings.Contains(said, "is inlined into Buffer::view(const BufferRegion&)") {
		t.Errorf("objdump: Buffer::view inlines Buffer::create(address): %v; doctor said:\n%s", inlined, said)
	}
	if inlined && (!strings.Contains(said, "totals unaffected") || !contains(status["buffer_create_view"], "attached") ||
		strings.Contains(strings.Join(rep.Plan.Caveats, " "), "Buffer::view")) {
		t.Errorf("an inlined view create must leave the create attached and the plan exact: %v\n%s", status["buffer_create_view"], said)
	}
	present, calls, total := objdumpCallers(t, lib, reAllocateCBs, reTrackAllocateCB)
	if want := present && !calls; contains(status["track_allocate_cb"], "inlined") != want {
		t.Errorf("track_allocate_cb %v; objdump: allocate_circular_buffers present %v, calls it %v", status["track_allocate_cb"], present, calls)
	}
	if noCaller := !present && total == 0; noCaller != strings.Contains(said, "track_allocate_cb has no caller in this library") {
		t.Errorf("objdump: %d calls to track_allocate_cb, allocate_circular_buffers present %v; doctor said:\n%s", total, present, said)
	}
	if strings.Contains(said, "(inlined)") {
		t.Errorf("doctor guesses \"(inlined)\":\n%s", said)
	}
}

// viewsInlined reports whether objdump finds Buffer::view in lib without a
// call to Buffer::create(device, address, ...): the views it makes are
// then not seen, and the truth's count of view creations is that much
// higher than what is traced.
func viewsInlined(t *testing.T, lib string) bool {
	present, calls, _ := objdumpCallers(t, lib, reBufferView, reBufferCreateView)
	return present && !calls
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// checkVariantRun traces r and compares with the truth. A run with the
// lifecycle plan also sees deallocate_impl of buffers whose chip was closed
// first (the tracker does not): the ledger must count exactly those as
// frees after release, and nothing else changes. (Views a build cannot
// show are taken out of the truth by trace: visibleViews.)
func checkVariantRun(t *testing.T, r run, plan string) {
	t.Helper()
	for i, f := range r.flags {
		if f == "--probes" && i+1 < len(r.flags) {
			plan = r.flags[i+1]
		}
	}
	sum, tr := trace(t, r)
	onClosed := tr.Calls["deallocate_on_closed_device"]
	if _, ok := tr.Calls["deallocate_on_closed_device"]; !ok {
		t.Fatal("truth has no calls.deallocate_on_closed_device")
	}
	wantAfterRelease := uint64(0)
	if plan == "lifecycle" {
		tr.Calls["track_deallocate"] += onClosed
		wantAfterRelease = onClosed
	}
	for _, d := range compare(r, sum, tr) {
		t.Error(d)
	}
	for _, p := range sum.Processes {
		if p.Pid == tr.Pid && p.Stats.FreesAfterRelease != wantAfterRelease {
			t.Errorf("%s: frees_after_release %d, want %d (%s plan)", r.name(), p.Stats.FreesAfterRelease, wantAfterRelease, plan)
		}
	}
}

// TestE2EVariants: doctor and traced scenarios on every variant.
func TestE2EVariants(t *testing.T) {
	for _, v := range variantCases {
		t.Run(v.name, func(t *testing.T) {
			dir := variantDir(t, v.name)
			lib := filepath.Join(dir, "libtt_metal.so")
			t.Run("doctor", func(t *testing.T) { checkDoctor(t, v, lib) })
			for _, r := range v.scenarios {
				r.variant = v.name
				name := r.mode + "_" + r.scenario
				if len(r.flags) > 0 {
					name += "_" + strings.Join(r.flags, "")
				}
				t.Run(name, func(t *testing.T) { checkVariantRun(t, r, v.plan) })
			}
		})
	}
}

// TestE2EPimpl2LifecycleRefused: on a pimpl-2 build the lifecycle plan's
// functions are BufferImpl's; --probes lifecycle is refused before the
// command runs, naming them, and doctor notes the design on the tracker plan.
func TestE2EPimpl2LifecycleRefused(t *testing.T) {
	bin, _ := setup(t)
	dir := variantDir(t, "v2-pimpl2-gcc-O2")
	lib := filepath.Join(dir, "libtt_metal.so")
	truth := filepath.Join(t.TempDir(), "truth.json")
	cmd := exec.Command(bin, "--json", "--probes", "lifecycle", "--lib", lib, "--",
		filepath.Join(dir, "ttwork"), "--scenario", "basic", "--truth", truth)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatalf("--probes lifecycle on a pimpl-2 build was accepted:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "BufferImpl::allocate_impl(Buffer&)") || !strings.Contains(stderr.String(), "--probes tracker") {
		t.Errorf("refusal does not name BufferImpl's lifecycle: %s", stderr.String())
	}
	if _, err := os.Stat(truth); err == nil {
		t.Error("the command ran although tracing was refused")
	}
	out, err := exec.Command(bin, "doctor", "--json", lib).Output()
	if err != nil {
		t.Fatalf("doctor: %v", err)
	}
	var rep struct {
		Plan struct {
			Kind  string   `json:"kind"`
			Notes []string `json:"notes"`
		} `json:"plan"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Plan.Kind != "tracker" || !strings.Contains(strings.Join(rep.Plan.Notes, " "), "2026 pimpl design") {
		t.Errorf("doctor: plan %s, notes %q", rep.Plan.Kind, rep.Plan.Notes)
	}
}

// TestE2EUnknownLayoutRefused: a layout no profile describes, without
// DWARF, is refused before the command runs, with a message that names
// what was checked; doctor says the same. With the offsets given in a
// layout file (docs/layout.md) the same build traces exactly.
func TestE2EUnknownLayoutRefused(t *testing.T) {
	bin, _ := setup(t)
	dir := variantDir(t, "unknown-gcc-O2")
	lib := filepath.Join(dir, "libtt_metal.so")
	truth := filepath.Join(t.TempDir(), "truth.json")
	cmd := exec.Command(bin, "--json", "--lib", lib, "--", filepath.Join(dir, "ttwork"), "--scenario", "basic", "--truth", truth)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 6 {
		t.Fatalf("tttrace on an unknown layout: %v (want exit 6)\n%s", err, stderr.String())
	}
	if len(out) != 0 {
		t.Errorf("refused, yet wrote output: %.300s", out)
	}
	if _, err := os.Stat(truth); err == nil {
		t.Error("the command ran although its library was refused")
	}
	msg := stderr.String()
	for _, want := range []string{"layout of tt::tt_metal::Buffer is unknown", "--layout: not given", "no .debug_info",
		".build-id", "Buffer::address() const", "address_ is at 16", "profile V1", "profile V0", "profile V2", "--layout FILE"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal does not say %q:\n%s", want, msg)
		}
	}
	rep, code, raw := doctor(t, lib)
	if code != 6 || rep.Traceable || !strings.Contains(rep.Error, "address_ is at 16") || rep.Layout == nil || len(rep.Layout.Checked) < 3 {
		t.Errorf("doctor on the unknown layout: exit %d, traceable %v, error %q\n%s", code, rep.Traceable, rep.Error, raw)
	}

	// The user's layout file, in the documented format, makes it traceable.
	layout := filepath.Join(t.TempDir(), "unknown.json")
	u := replicaUnknown
	os.WriteFile(layout, []byte(fmt.Sprintf(`{"name":"replica UNKNOWN","buffer_impl_ptr":%d,"device":%d,"size":%d,"buffer_type":%d,`+
		`"owns_data":%d,"allocation_status":%d,"hooked_allocation":%d,"address":%d,"page_size":%d,"device_id":%d}`,
		u.ImplPtr, u.Device, u.Size, u.Type, u.OwnsData, u.Status, u.Hooked, u.Address, u.PageSize, u.DeviceID)), 0o644)
	for _, r := range []run{
		{variant: "unknown-gcc-O2", mode: "cmd", scenario: "basic", args: []string{"--leak"}, peaks: true, flags: []string{"--layout", layout}},
		{variant: "unknown-gcc-O2", mode: "cmd", scenario: "mesh", args: []string{"--leak"}, peaks: true, flags: []string{"--layout", layout}},
	} {
		t.Run("layout_file_"+r.scenario, func(t *testing.T) { checkVariantRun(t, r, "tracker") })
	}
}

// TestE2EDoctorForcedPlans: --probes overrides the choice; forcing the
// tracker plan on a build whose tracker calls are inlined is reported as
// not exact. The human output says the same as the JSON.
func TestE2EDoctorForcedPlans(t *testing.T) {
	bin, _ := setup(t)
	lib := filepath.Join(variantDir(t, "inline-gcc-O2"), "libtt_metal.so")
	rep, code, raw := doctor(t, "--probes", "tracker", lib)
	if code != 0 || rep.Plan == nil || rep.Plan.Kind != "tracker" || rep.Exact ||
		!strings.Contains(strings.Join(rep.Plan.Caveats, " "), "not called") {
		t.Errorf("forced tracker plan on inlined tracker: exit %d\n%s", code, raw)
	}
	if rep.Plan != nil && (rep.Plan.Calls["GraphTracker::track_allocate"] != 0 || rep.Plan.Calls["GraphTracker::track_deallocate"] != 0) {
		t.Errorf("call sites of the inlined tracker: %v, want 0", rep.Plan.Calls)
	}
	lib = filepath.Join(variantDir(t, "gcc-O2"), "libtt_metal.so")
	rep, _, raw = doctor(t, "--probes", "lifecycle", lib)
	if rep.Plan == nil || rep.Plan.Kind != "lifecycle" || !rep.Exact {
		t.Errorf("forced lifecycle plan on gcc-O2:\n%s", raw)
	}
	if rep.Plan != nil && (rep.Plan.Calls["GraphTracker::track_allocate"] == 0 || rep.Plan.Calls["Buffer::allocate_impl"] == 0) {
		t.Errorf("call sites on gcc-O2: %v, want track_allocate and allocate_impl called", rep.Plan.Calls)
	}
	out, err := exec.Command(bin, "doctor", lib).CombinedOutput()
	if err != nil {
		t.Fatalf("doctor: %v\n%s", err, out)
	}
	for _, want := range []string{"Library", "build-id", "Layout", "Probe plan   tracker", "Attach points", "Kernel",
		"BPF ring buffer", "BPF cookie", "BTF", "uprobe multi-link", "tracing would be exact"} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("doctor's report lacks %q:\n%s", want, out)
		}
	}
	if out, err := exec.Command(bin, "doctor", "--probes", "sometimes", lib).CombinedOutput(); err == nil {
		t.Errorf("doctor accepted --probes sometimes:\n%s", out)
	}
}

// TestE2EInlinedTrackerForcedIsCaught: the tracker plan forced on a build
// whose tracker calls are inlined misses every allocation and free; the
// comparison with the truth must say so (what the lifecycle plan and the
// automatic choice exist for).
func TestE2EInlinedTrackerForcedIsCaught(t *testing.T) {
	variantDir(t, "inline-gcc-O2")
	r := run{variant: "inline-gcc-O2", mode: "cmd", scenario: "basic", args: []string{"--leak"}, flags: []string{"--probes", "tracker"}}
	mustBeCaught(t, r, "the tracker plan on an inlined tracker")
}

// TestE2EDoctorPid: doctor -p finds the library a running process mapped.
func TestE2EDoctorPid(t *testing.T) {
	dir := variantDir(t, "v2-clang-O3")
	goFile := filepath.Join(t.TempDir(), "go")
	w := exec.Command(filepath.Join(dir, "ttwork"), "--scenario", "basic", "--go-file", goFile)
	var wout bytes.Buffer
	w.Stdout, w.Stderr = &wout, &wout
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		os.WriteFile(goFile, nil, 0o644)
		w.Wait()
	}()
	waitFor(t, func() bool { return strings.Contains(wout.String(), "ready") }, "workload ready")
	rep, code, raw := doctor(t, "-p", strconv.Itoa(w.Process.Pid))
	if code != 0 || !rep.Traceable || rep.Library == nil || rep.Plan == nil {
		t.Fatalf("doctor -p: exit %d\n%s", code, raw)
	}
	if !strings.HasSuffix(rep.Library.Path, filepath.Join(dir, "libtt_metal.so")) || !rep.Library.Pimpl ||
		!strings.Contains(rep.Layout.From, "profile V2") {
		t.Errorf("doctor -p found %s (pimpl %v, layout from %s)", rep.Library.Path, rep.Library.Pimpl, rep.Layout.From)
	}
}

// checkPlaced: an entry probe moved below the function's start (at entry)
// to at must skip only instructions that set flags (objdump: endbr64,
// test, cmp) and sit on one the kernel emulates (push, a jump, a call).
// checkLoadsOOMMessage: objdump finds at `at` a lea whose rip-relative
// target holds "Out of Memory: Not enough space".
func checkLoadsOOMMessage(t *testing.T, lib string, at uint64) {
	t.Helper()
	d, err := exec.Command("objdump", "-d", "--no-show-raw-insn", fmt.Sprintf("--start-address=%#x", at),
		fmt.Sprintf("--stop-address=%#x", at+16), lib).Output()
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(fmt.Sprintf(`(?m)^\s*%x:\s+lea\s+\S+\(%%rip\),%%\w+\s+#\s+([0-9a-f]+)`, at)).FindSubmatch(d)
	if m == nil {
		t.Errorf("bank_manager_oom at %#x: objdump finds no rip-relative lea there:\n%s", at, d)
		return
	}
	target, _ := strconv.ParseUint(string(m[1]), 16, 64)
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const msg = "Out of Memory: Not enough space"
	for _, sec := range f.Sections {
		if sec.Type == elf.SHT_PROGBITS && target >= sec.Addr && target+uint64(len(msg)) <= sec.Addr+sec.Size {
			b := make([]byte, len(msg))
			if _, err := sec.ReadAt(b, int64(target-sec.Addr)); err != nil || string(b) != msg {
				t.Errorf("bank_manager_oom at %#x: the lea loads %#x, which holds %q", at, target, b)
			}
			return
		}
	}
	t.Errorf("bank_manager_oom at %#x: the lea loads %#x, in no section", at, target)
}

func checkPlaced(t *testing.T, lib, prog string, entry, at uint64) {
	t.Helper()
	if at == entry {
		// Left on endbr64: right only when the instruction after it is
		// one the kernel does not emulate (a thin wrapper's mov before its
		// tail call), so no placement was possible.
		d, err := exec.Command("objdump", "-d", "--no-show-raw-insn", fmt.Sprintf("--start-address=%#x", entry),
			fmt.Sprintf("--stop-address=%#x", entry+16), lib).Output()
		if err != nil {
			t.Fatal(err)
		}
		ops := regexp.MustCompile(`(?m)^\s*[0-9a-f]+:\s+(\S+)`).FindAllSubmatch(d, 2)
		if len(ops) == 2 && string(ops[0][1]) == "endbr64" {
			if op := string(ops[1][1]); op == "push" || strings.HasPrefix(op, "j") || op == "call" {
				t.Errorf("%s: its entry probe was not moved below endbr64 to %q, which the kernel emulates", prog, op)
			}
		}
		return
	}
	d, err := exec.Command("objdump", "-d", "--no-show-raw-insn", fmt.Sprintf("--start-address=%#x", entry),
		fmt.Sprintf("--stop-address=%#x", at+16), lib).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*([0-9a-f]+):\s+(\S+)`).FindAllSubmatch(d, -1) {
		addr, _ := strconv.ParseUint(string(m[1]), 16, 64)
		op := string(m[2])
		switch {
		case addr > at:
		case addr < at && op != "endbr64" && op != "test" && op != "cmp" && !strings.HasPrefix(op, "cmp"):
			t.Errorf("%s: the probe at %#x skips %q at %#x", prog, at, op, addr)
		case addr == at && op != "push" && !strings.HasPrefix(op, "j") && op != "call":
			t.Errorf("%s: the probe at %#x sits on %q, which the kernel does not emulate", prog, at, op)
		}
	}
}
