package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The systemd unit is valid (systemd-analyze verify, where systemd is) and
// bounds the service: memory, tasks, and an OOM score that makes tttrace,
// not the traced programs, the first to go. Its capabilities are checked by
// TestE2EPythonLines (mode unit), which runs tttrace with them.
func TestSystemdUnit(t *testing.T) {
	path := filepath.Join("..", "..", "contrib", "systemd", "tttrace.service")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			set[k] = v
		}
	}
	for _, k := range []string{"MemoryMax", "MemoryHigh", "TasksMax"} {
		if v := set[k]; v == "" || v == "infinity" {
			t.Errorf("%s = %q: the service is not bounded", k, v)
		}
	}
	if v := set["OOMScoreAdjust"]; v == "" || strings.HasPrefix(v, "-") || v == "0" {
		t.Errorf("OOMScoreAdjust = %q: want a positive score", v)
	}
	if !strings.Contains(set["CapabilityBoundingSet"], "CAP_CHECKPOINT_RESTORE") {
		t.Errorf("CapabilityBoundingSet = %q: /proc/PID/map_files needs CAP_CHECKPOINT_RESTORE", set["CapabilityBoundingSet"])
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("no systemd-analyze")
	}
	// verify wants the unit's binary to exist: point it at this test's.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(t.TempDir(), "tttrace.service")
	text := strings.ReplaceAll(string(b), "/usr/local/bin/tttrace", self)
	if err := os.WriteFile(unit, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", unit).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}
