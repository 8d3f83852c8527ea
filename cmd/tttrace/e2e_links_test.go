package main

// End-to-end tests of how the probes are attached: uprobe_multi links (one
// per program and library) where the kernel has them, classic uprobes (the
// fallback of kernels before 6.6) when forced, and the loader probe limited
// to the traced processes. The links are read back from the kernel
// (/proc/PID/fdinfo of tttrace), the ledgers compared with the replica's
// ground truth.

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/probes"
)

// bpfLink is what the kernel shows of one BPF link of a process.
type bpfLink struct {
	typ    string // link_type: uprobe_multi, perf, raw_tracepoint, ...
	path   string // uprobe_multi: the file; perf: the name given
	pid    int    // uprobe_multi: the process it is limited to (0: all)
	prog   int    // the program's id
	points []probePoint
}

type probePoint struct{ offset, cookie uint64 }

// linksOf reads the BPF links held by process pid.
func linksOf(t *testing.T, pid int) []bpfLink {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fdinfo", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var links []bpfLink
	for _, e := range ents {
		f, err := os.Open(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		var l bpfLink
		var perfOffset uint64
		var perfCookie uint64
		table := false
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := sc.Text()
			if table {
				var p probePoint
				var ref uint64
				if _, err := fmt.Sscanf(line, "%d %v %v", &p.cookie, &p.offset, &ref); err != nil {
					t.Fatalf("%s: uprobe_multi line %q: %v", e.Name(), line, err)
				}
				l.points = append(l.points, p)
				continue
			}
			k, v, _ := strings.Cut(line, ":")
			v = strings.TrimSpace(v)
			switch k {
			case "link_type":
				l.typ = v
			case "path", "name":
				l.path = v
			case "pid":
				l.pid, _ = strconv.Atoi(v)
			case "prog_id":
				l.prog, _ = strconv.Atoi(v)
			case "offset":
				perfOffset, _ = strconv.ParseUint(v, 0, 64)
			case "cookie":
				perfCookie, _ = strconv.ParseUint(v, 0, 64)
			default:
				table = strings.HasPrefix(line, "cookie\t")
			}
		}
		f.Close()
		if l.typ == "" {
			continue
		}
		if l.typ == "perf" {
			l.points = []probePoint{{perfOffset, perfCookie}}
		}
		links = append(links, l)
	}
	return links
}

// staticAddr maps a file offset of lib to its link-time address, from the
// program headers.
func staticAddr(t *testing.T, lib string, off uint64) uint64 {
	t.Helper()
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && off >= p.Off && off < p.Off+p.Filesz {
			return off - p.Off + p.Vaddr
		}
	}
	t.Fatalf("%s: offset %#x is in no loaded segment", lib, off)
	return 0
}

// multiPidFilter says whether tttrace limits a uprobe_multi link to a pid:
// from Linux 6.10 on, where the filter passes every thread of the process.
func multiPidFilter(t *testing.T) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var major, minor int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor)
	return major > 6 || major == 6 && minor >= 10
}

var probeCount = regexp.MustCompile(`tracing \((\d+) probes\)`)

// TestE2EUprobeLinks: -p on the replica, with uprobe_multi links and with
// classic uprobes forced. Checked against the kernel's view of tttrace's
// links: the mechanism; every attach point once, with the cookie holding
// the library index (0) and the point's link-time address (from the ELF
// program headers); the library probes for every process; the loader probe
// limited to the traced pid, unless --follow needs it everywhere. And the
// ledger against the replica's truth.
func TestE2EUprobeLinks(t *testing.T) {
	multiOK := probes.HaveUprobeMulti() == nil
	for _, c := range []struct {
		name    string
		variant string
		flags   []string
		multi   bool
		follow  bool
	}{
		{"multi", "gcc-O2", nil, true, false},
		{"multi_follow", "gcc-O2", []string{"--follow"}, true, true},
		// The lifecycle plan probes both exits of allocate_impl with one
		// program: one link with two attach points.
		{"multi_inline", "inline-gcc-O2", nil, true, false},
		{"single", "gcc-O2", []string{"--no-uprobe-multi"}, false, false},
		{"single_inline", "inline-gcc-O2", []string{"--no-uprobe-multi"}, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin, replica := setup(t)
			if c.multi && !multiOK {
				t.Skip("this kernel has no uprobe_multi links")
			}
			dir := filepath.Join(replica, c.variant)
			lib := filepath.Join(dir, "libtt_metal.so")
			tmp := t.TempDir()
			goFile, ready, out, truthPath := filepath.Join(tmp, "go"), filepath.Join(tmp, "ready"), filepath.Join(tmp, "out"), filepath.Join(tmp, "truth")
			w, wout := start(t, filepath.Join(dir, "ttwork"), "--scenario", "basic", "--leak", "--truth", truthPath, "--go-file", goFile)
			waitFor(t, func() bool { return strings.Contains(wout.String(), "ready") }, "workload ready")
			args := append([]string{"--json", "-o", out, "--ready-file", ready, "-p", strconv.Itoa(w.Process.Pid)}, c.flags...)
			tt, tout := start(t, bin, args...)
			waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
			m := probeCount.FindStringSubmatch(tout.String())
			if m == nil {
				t.Fatalf("tttrace did not say how many probes it attached:\n%s", tout)
			}
			nProbes, _ := strconv.Atoi(m[1])

			var libLinks, loaderLinks []bpfLink
			for _, l := range linksOf(t, tt.Process.Pid) {
				switch {
				case l.typ == "raw_tracepoint":
				case strings.HasSuffix(l.path, "libtt_metal.so"):
					libLinks = append(libLinks, l)
				case strings.HasPrefix(filepath.Base(l.path), "ld-linux"):
					loaderLinks = append(loaderLinks, l)
				default:
					t.Errorf("unexpected link %+v", l)
				}
			}
			wantType := "perf"
			if c.multi {
				wantType = "uprobe_multi"
			}
			seen := map[uint64]bool{}
			progs := map[int]bool{}
			for _, l := range append(libLinks, loaderLinks...) {
				if l.typ != wantType {
					t.Errorf("%s link on %s, want %s", l.typ, l.path, wantType)
				}
			}
			for _, l := range libLinks {
				if c.multi && progs[l.prog] {
					t.Errorf("program %d has two uprobe_multi links on the library: want one per program", l.prog)
				}
				progs[l.prog] = true
				if l.pid != 0 {
					t.Errorf("library link limited to pid %d: the library must be probed in every process", l.pid)
				}
				for _, p := range l.points {
					if seen[p.offset] {
						t.Errorf("offset %#x attached twice", p.offset)
					}
					seen[p.offset] = true
					if idx := p.cookie >> 48; idx != 0 {
						t.Errorf("offset %#x: cookie %#x names library %d, want 0", p.offset, p.cookie, idx)
					}
					if got, want := p.cookie&(1<<48-1), staticAddr(t, lib, p.offset); got != want {
						t.Errorf("offset %#x: cookie address %#x, want the link-time address %#x", p.offset, got, want)
					}
				}
			}
			if len(seen) != nProbes {
				t.Errorf("%d attach points in the kernel's library links, tttrace says %d probes", len(seen), nProbes)
			}
			if !c.multi && len(libLinks) != nProbes {
				t.Errorf("%d uprobe links for %d probes: want one per probe", len(libLinks), nProbes)
			}
			if c.name == "multi_inline" && len(libLinks) >= nProbes {
				t.Errorf("%d uprobe_multi links for %d probes of the lifecycle plan: want fewer, one per program", len(libLinks), nProbes)
			}
			if len(loaderLinks) != 1 || len(loaderLinks[0].points) != 1 {
				t.Fatalf("loader links: %+v, want one with one attach point", loaderLinks)
			}
			if c.multi {
				wantPid := w.Process.Pid
				if c.follow || !multiPidFilter(t) {
					wantPid = 0 // children are added when they fork: the probe must be everywhere
				}
				if got := loaderLinks[0].pid; got != wantPid {
					t.Errorf("loader link limited to pid %d, want %d", got, wantPid)
				}
			}

			touch(t, goFile)
			if err := w.Wait(); err != nil {
				t.Fatalf("workload: %v\n%s", err, wout)
			}
			if err := tt.Wait(); err != nil {
				t.Fatalf("tttrace: %v\n%s", err, tout)
			}
			wantExact(t, "links-"+c.name, true, lastSummary(t, out), readTruth(t, truthPath))
		})
	}
}

// TestE2ESingleUprobes: the fallback of kernels without uprobe_multi links,
// forced, is exact in every mode (-p is in TestE2EUprobeLinks).
func TestE2ESingleUprobes(t *testing.T) {
	single := []string{"--no-uprobe-multi"}
	for _, r := range []run{
		{variant: "gcc-O2", mode: "cmd", scenario: "basic", args: []string{"--leak"}, peaks: true, flags: single},
		{variant: "gcc-O2", mode: "python", scenario: "basic", args: []string{"--leak"}, peaks: true, flags: single},
		{variant: "gcc-O2", mode: "cmd", scenario: "threads", args: []string{"--leak", "--threads", "4", "--seed", "7"}, flags: single},
		{variant: "gcc-O2", mode: "cmd", scenario: "mesh", args: []string{"--leak"}, peaks: true, flags: single},
	} {
		t.Run(strings.ReplaceAll(r.name(), "/", "_"), func(t *testing.T) { check(t, r) })
	}
}

// TestE2ELoaderOnlyCommand: -- CMD --follow=false limits the loader probe to
// the command. A library that is no candidate (a renamed copy, loaded by
// Python) is found only through that probe: the dlopen in the command must
// still be heard, with uprobe_multi links and with classic uprobes.
func TestE2ELoaderOnlyCommand(t *testing.T) {
	for _, mech := range []string{"multi", "single"} {
		t.Run(mech, func(t *testing.T) {
			bin, replica := setup(t)
			if mech == "multi" && probes.HaveUprobeMulti() != nil {
				t.Skip("this kernel has no uprobe_multi links")
			}
			dir := filepath.Join(replica, "gcc-O2")
			tmp := t.TempDir()
			renamed := filepath.Join(tmp, "elsewhere", "_ttnn.so")
			os.MkdirAll(filepath.Dir(renamed), 0o755)
			b, err := os.ReadFile(filepath.Join(dir, "libtt_metal.so"))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(renamed, b, 0o755)
			goFile, out, truthPath := filepath.Join(tmp, "go"), filepath.Join(tmp, "out"), filepath.Join(tmp, "truth")
			args := []string{"--json", "-o", out, "--follow=false"}
			if mech == "single" {
				args = append(args, "--no-uprobe-multi")
			}
			args = append(args, "--", "python3", filepath.Join(dir, "ttwork.py"),
				"--preload", renamed, "--scenario", "basic", "--leak", "--truth", truthPath, "--go-file", goFile)
			tt, tout := start(t, bin, args...)
			waitFor(t, func() bool { return strings.Contains(tout.String(), "not probed in advance") }, "late attach of the renamed copy")
			var loader []bpfLink
			for _, l := range linksOf(t, tt.Process.Pid) {
				if strings.Contains(l.path, "ld-linux") {
					loader = append(loader, l)
				}
			}
			touch(t, goFile)
			// A renamed copy probed only when mapped: late_library, 11.
			if err := tt.Wait(); exitCode(err) != 11 {
				t.Fatalf("tttrace: %v, want exit status 11 (late_library)\n%s", err, tout)
			}
			tr := readTruth(t, truthPath)
			wantExact(t, "loader-only-command", true, lastSummary(t, out), tr)
			if len(loader) != 1 {
				t.Fatalf("loader links %+v: want one", loader)
			}
			if mech == "multi" && multiPidFilter(t) && loader[0].pid != int(tr.Pid) {
				t.Errorf("loader link limited to pid %d, want the command's pid %d", loader[0].pid, tr.Pid)
			}
		})
	}
}

// TestE2ELoaderThread: -p on a process that loads a library which is no
// candidate (a renamed copy) from a thread other than its main thread: the
// loader probe limited to the process must fire in that thread too.
func TestE2ELoaderThread(t *testing.T) {
	for _, mech := range []string{"multi", "single"} {
		t.Run(mech, func(t *testing.T) {
			bin, replica := setup(t)
			if mech == "multi" && probes.HaveUprobeMulti() != nil {
				t.Skip("this kernel has no uprobe_multi links")
			}
			tmp := t.TempDir()
			renamed := filepath.Join(tmp, "elsewhere", "_ttnn.so")
			os.MkdirAll(filepath.Dir(renamed), 0o755)
			b, err := os.ReadFile(filepath.Join(replica, "gcc-O2", "libtt_metal.so"))
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(renamed, b, 0o755)
			goFile, ready := filepath.Join(tmp, "go"), filepath.Join(tmp, "ready")
			script := `import ctypes, os, sys, threading, time
print("waiting", flush=True)
while not os.path.exists(sys.argv[2]):
    time.sleep(0.005)
def load():
    assert threading.get_native_id() != os.getpid()
    ctypes.CDLL(sys.argv[1])
th = threading.Thread(target=load)
th.start()
th.join()
time.sleep(0.5)
`
			w, wout := start(t, "python3", "-c", script, renamed, goFile)
			waitFor(t, func() bool { return strings.Contains(wout.String(), "waiting") }, "python waiting")
			args := []string{"--json", "--no-events", "-o", filepath.Join(tmp, "out"), "--ready-file", ready, "-p", strconv.Itoa(w.Process.Pid)}
			if mech == "single" {
				args = append(args, "--no-uprobe-multi")
			}
			tt, tout := start(t, bin, args...)
			waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
			touch(t, goFile)
			if err := w.Wait(); err != nil {
				t.Fatalf("python: %v\n%s", err, wout)
			}
			// A renamed copy probed only when mapped: late_library, 11.
			if err := tt.Wait(); exitCode(err) != 11 {
				t.Fatalf("tttrace: %v, want exit status 11 (late_library)\n%s", err, tout)
			}
			heard := regexp.MustCompile(fmt.Sprintf(`pid %d loaded \S*%s, which was not probed in advance`, w.Process.Pid, regexp.QuoteMeta(renamed)))
			if !heard.MatchString(tout.String()) {
				t.Errorf("tttrace did not hear the load from a thread (want %q):\n%s", heard, tout)
			}
		})
	}
}

// progRuns sums the run counts (kernel BPF statistics) of the uprobe
// programs process pid holds.
func progRuns(t *testing.T, pid int) uint64 {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	seen := map[string]bool{}
	for _, e := range ents {
		if target, _ := os.Readlink(filepath.Join(dir, e.Name())); target != "anon_inode:bpf-prog" {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		if err != nil {
			continue
		}
		kv := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok {
				kv[k] = strings.TrimSpace(v)
			}
		}
		if kv["prog_type"] != "2" || seen[kv["prog_id"]] { // BPF_PROG_TYPE_KPROBE: the uprobe programs
			continue
		}
		seen[kv["prog_id"]] = true
		r, _ := strconv.ParseUint(kv["run_cnt"], 10, 64)
		n += r
	}
	return n
}

// TestE2ELoaderProbeHits: while tttrace -p waits for a process, other
// processes starting on the machine do not run its loader probe (counted by
// the kernel's BPF statistics); with --follow they do (it must be in every
// process), with both mechanisms.
func TestE2ELoaderProbeHits(t *testing.T) {
	bin, _ := setup(t)
	stats, err := ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
	if err != nil {
		t.Skipf("no BPF run statistics: %v", err)
	}
	defer stats.Close()
	for _, c := range []struct {
		name    string
		flags   []string
		multi   bool
		limited bool // the probe must not run in other processes
	}{
		{"multi", nil, true, true},
		{"multi_follow", []string{"--follow"}, true, false},
		{"single", []string{"--no-uprobe-multi"}, false, true},
		{"single_follow", []string{"--no-uprobe-multi", "--follow"}, false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.multi && probes.HaveUprobeMulti() != nil {
				t.Skip("this kernel has no uprobe_multi links")
			}
			limited := c.limited && (!c.multi || multiPidFilter(t))
			held, _ := start(t, "sleep", "60")
			ready := filepath.Join(t.TempDir(), "ready")
			args := append([]string{"--json", "--no-events", "-o", os.DevNull, "--ready-file", ready, "-p", strconv.Itoa(held.Process.Pid)}, c.flags...)
			tt, tout := start(t, bin, args...)
			waitFor(t, func() bool { _, err := os.Stat(ready); return err == nil }, "tttrace ready")
			before := progRuns(t, tt.Process.Pid)
			const starts = 20
			for i := 0; i < starts; i++ {
				if err := exec.Command("/bin/true").Run(); err != nil {
					t.Fatal(err)
				}
			}
			runs := progRuns(t, tt.Process.Pid) - before
			held.Process.Kill()
			held.Wait()
			tt.Wait()
			switch {
			case limited && runs != 0:
				t.Errorf("tttrace's uprobe programs ran %d times during %d starts of other processes, want 0\n%s", runs, starts, tout)
			case !limited && runs < starts:
				t.Errorf("tttrace's uprobe programs ran %d times during %d starts, want at least one per start (the loader probe is in every process)\n%s", runs, starts, tout)
			}
		})
	}
}
