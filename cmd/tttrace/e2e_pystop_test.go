package main

// The native stacks of a Python thread end at the interpreter's evaluation
// loop (stacks.Table.SetStops, session/sites.go evalStops, docs/stacks.md):
// the native frames past its first _PyEval_EvalFrameDefault frame are the
// interpreter's, which the Python stack names. However deep the Python
// code, the native chain then stays short enough for the kernel to know it
// (at most 32 return addresses): before, a chain through a deep Python
// stack was never known and every allocation sent its 16 KiB stack (a
// pytest run: 68 native frames, 0 of 50,000 stacks known).

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/devices"
)

// stopScript allocates 30 Python calls deep, each call made from C (map
// and sum call the next level), so that in every CPython version the
// evaluation loop nests once per level on the native stack: a burst of
// 200 events, a pause, then one of 6,000.
const stopScript = pyLibScript + `def work():
    enc = [b"ttwork", b"--scenario", b"burst", b"--threads", b"0", b"--events", events, b"--leak"]
    argv = (ctypes.c_char_p * (len(enc) + 1))(*enc, None)
    assert lib.ttwork_main(len(enc), argv) == 0
def deep(n):
    if n == 0:
        work()
        return 0
    return sum(map(deep, [n - 1]))
for events in (b"200", b"6000"):  # one line: the same chains
    deep(30)
    time.sleep(0.5)  # tttrace learns the chains of the first burst
`

func TestE2EPythonNativeStop(t *testing.T) {
	_, replica := setup(t)
	script := filepath.Join(t.TempDir(), "stop.py")
	if err := os.WriteFile(script, []byte(stopScript), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(replica, "gcc-O2")
	lib := filepath.Join(dir, "libtt_metal.so")
	for _, py := range interpreters(t) {
		if _, minor := pythonVersion(t, py); minor < 10 || minor > 13 {
			continue
		}
		t.Run(strings.TrimPrefix(py, "/"), func(t *testing.T) {
			target := []string{py, script, dir}
			_, log := traceKnown(t, lib, []string{"--check-known-stacks"}, target)
			copied, known, checked, wrong := knownCountsOf(t, log)
			t.Logf("%d stacks copied, %d known, %d checked", copied, known, checked)
			// 3,100 allocations: some of the first burst's are copied
			// until its chains are learnt (how many depends on how fast
			// tttrace reads them, against how fast the burst goes: up to
			// 1,204 of 3,000 without the pause), the second's are known
			// but where the interpreter specialized the ctypes call in
			// between, which changes the chain's last return address
			// (3.13: 2,740-2,943 known here).
			if wrong != 0 || checked != known || known < 2500 {
				t.Errorf("%d copied, %d known, %d checked, %d wrong: want most known, all checked, none wrong\n%s", copied, known, checked, wrong, log)
			}
			// One site for the burst's allocations, however the
			// interpreter ran the call that made them.
			if n := maxSiteAllocs(t, lib, target); n < 3050 {
				t.Errorf("the busiest site has %d allocations; the bursts' 3,098 (from one line of Python and one of C++) should all be there", n)
			}
			// The leaked buffer's site: native frames up to the evaluation
			// loop, then the Python frames, all 30 levels.
			_, got := sameLeakSites(t, lib, target)
			checkStopSite(t, got)
		})
	}
}

// maxSiteAllocs traces target with every event and returns the most
// allocations any one site of it made.
func maxSiteAllocs(t *testing.T, lib string, target []string) int {
	t.Helper()
	bin, _ := setup(t)
	out := filepath.Join(t.TempDir(), "events.ndjson")
	args := append([]string{"--json", "-o", out, "--lib", lib, "--"}, target...)
	if b, err := exec.Command(bin, args...).CombinedOutput(); err != nil {
		t.Fatalf("tttrace %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := map[uint32]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var r struct {
			Type string `json:"type"`
			Site uint32 `json:"site"`
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		if r.Type == "alloc" && r.Site != 0 {
			n[r.Site]++
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	most := 0
	for _, c := range n {
		most = max(most, c)
	}
	return most
}

// checkStopSite: every leak's site ends its native frames below the
// evaluation loop, where the Python frames take over, all levels of them:
// no _PyEval_EvalFrameDefault frame (the kernel's chain ends at the first,
// the site drops it: session/sites.go, siteNativeOf).
func checkStopSite(t *testing.T, sum *devices.Summary) {
	t.Helper()
	seen := 0
	for i := range sum.Processes {
		p := &sum.Processes[i]
		for _, s := range p.Sites {
			if len(s.Native) == 0 {
				continue
			}
			seen++
			evals := 0
			for _, f := range s.Native {
				if f.Function == "_PyEval_EvalFrameDefault" {
					evals++
				}
			}
			last := s.Native[len(s.Native)-1]
			deep := 0
			for _, f := range s.Python {
				if f.Function == "deep" {
					deep++
				}
			}
			if evals != 0 || s.Truncated || deep != 31 {
				t.Errorf("site %d: %d native frames ending in %q (%d evaluation loop frames), truncated %v, %d Python frames of deep: want the native frames to end below the evaluation loop and 31 of deep",
					s.Site, len(s.Native), last.Function, evals, s.Truncated, deep)
			}
		}
	}
	if seen == 0 {
		t.Error("no site with native frames")
	}
}
