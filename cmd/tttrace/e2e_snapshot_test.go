package main

// Snapshots end to end: `tttrace snapshot PID` while the traced workload
// pauses at a known point writes the NDJSON summary and the pprof profile
// as of then, equal to the replica's truth at that point; tracing goes on,
// and the final outputs have what came after.

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// awaitTruth reads a truth file once it is complete.
func awaitTruth(t *testing.T, path string) *truth {
	t.Helper()
	var tr truth
	waitFor(t, func() bool {
		b, err := os.ReadFile(path)
		return err == nil && json.Unmarshal(b, &tr) == nil
	}, path)
	return &tr
}

func TestE2ESnapshot(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	lib := filepath.Join(dir, "libtt_metal.so")
	tmp := t.TempDir()
	out, prof := filepath.Join(tmp, "out.ndjson"), filepath.Join(tmp, "mem.pb.gz")
	truthPath, hold := filepath.Join(tmp, "truth.json"), filepath.Join(tmp, "hold")
	// The first run (no leak) writes its truth and waits for hold; then the
	// library is unloaded and loaded again, and the second run leaks.
	work := []string{"python3", filepath.Join(dir, "ttwork.py"), "--reload", "--scenario", "basic", "--leak", "--truth", truthPath, "--hold-file", hold}
	args := append([]string{"--json", "-o", out, "--pprof", prof, "--lib", lib, "--"}, work...)
	cmd := exec.Command(bin, args...)
	var logs syncBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	first := awaitTruth(t, truthPath)
	visibleViews(t, lib, first)
	waitFor(t, func() bool { return strings.Contains(logs.String(), "holding") }, "the workload to hold")

	snap := exec.Command(bin, "snapshot", "12345678")
	if o, err := snap.CombinedOutput(); err == nil {
		t.Errorf("tttrace snapshot of no process succeeded: %s", o)
	}
	if o, err := exec.Command(bin, "snapshot", itoa(os.Getpid())).CombinedOutput(); err == nil || !strings.Contains(string(o), "not tttrace") {
		t.Errorf("tttrace snapshot of a process that is not tttrace: %v %s", err, o)
	}
	if o, err := exec.Command(bin, "snapshot", itoa(cmd.Process.Pid)).CombinedOutput(); err != nil {
		t.Fatalf("tttrace snapshot: %v\n%s", err, o)
	}
	waitFor(t, func() bool { return strings.Contains(logs.String(), "written: ") }, "the snapshot")
	if err := os.WriteFile(hold, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("tttrace: %v\n%s", err, logs.String())
	}

	snaps, _ := filepath.Glob(out + ".2*")
	profs, _ := filepath.Glob(prof + ".2*")
	if len(snaps) != 1 || len(profs) != 1 {
		t.Fatalf("snapshot files %v %v\n%s", snaps, profs, logs.String())
	}
	stamp := strings.TrimPrefix(snaps[0], out+".")
	if _, err := time.Parse("20060102T150405.000Z", stamp); err != nil || profs[0] != prof+"."+stamp {
		t.Errorf("snapshot suffix %q (profile %s): %v", stamp, profs[0], err)
	}

	// The snapshot: the ledger at the hold point, equal to the first
	// run's truth, the process still running.
	r := run{variant: "gcc-O2", mode: "python", scenario: "basic (snapshot at the hold)", peaks: true}
	mid := lastSummary(t, snaps[0])
	for _, d := range compare(r, mid, first) {
		if !strings.Contains(d, "not reported as exited") {
			t.Error(d)
		}
	}
	p := procOf(t, mid, first.Pid)
	if p.Exited {
		t.Errorf("the snapshot says the process exited")
	}
	checkProfileTotals(t, profs[0], first, true)

	// Tracing went on: the final summary and profile hold the second
	// run's leaks.
	second := awaitTruth(t, truthPath+".2")
	end := lastSummary(t, out)
	pe := procOf(t, end, second.Pid)
	if !pe.Exited || len(pe.Leaks) != len(second.Leaks) || len(second.Leaks) == 0 {
		t.Errorf("final summary: exited %v, %d leaks; the second run's truth has %d", pe.Exited, len(pe.Leaks), len(second.Leaks))
	}
	checkProfileTotals(t, prof, second, false)
}

// checkProfileTotals: the profile's in-use bytes per chip and type are the
// truth's totals (and with peaks, its peak bytes the truth's peaks).
func checkProfileTotals(t *testing.T, path string, tr *truth, peaks bool) {
	t.Helper()
	inuse, peak := map[ctKey]uint64{}, map[ctKey]uint64{}
	for _, s := range readRaw(t, path) {
		var c int32
		if _, err := fmtSscan(s.chip, &c); err != nil {
			t.Errorf("%s: chip label %q", path, s.chip)
		}
		inuse[ctKey{c, s.typ}] += s.v[0]
		peak[ctKey{c, s.typ}] += s.v[4]
	}
	for i := range tr.Devices {
		d := &tr.Devices[i]
		for typ, field := range truthFields {
			if typ == "CB" {
				continue
			}
			k := ctKey{d.Device, typ}
			if inuse[k] != d.total(field) || (peaks && peak[k] != d.Peaks[field]) {
				t.Errorf("%s: chip %d %s: in use %d, at peak %d; truth %d, %d", filepath.Base(path), d.Device, typ, inuse[k], peak[k], d.total(field), d.Peaks[field])
			}
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func fmtSscan(s string, c *int32) (int, error) { return fmt.Sscan(s, c) }
