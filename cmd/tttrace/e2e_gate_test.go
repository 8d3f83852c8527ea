package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestE2EFailOnLeak: --fail-on-leak as a CI gate. A workload that leaks
// makes tttrace exit 8 and say how much is left; one that frees
// everything exits 0; a threshold above what leaks lets it pass; a
// failing command keeps its own status.
func TestE2EFailOnLeak(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	lib, work := filepath.Join(dir, "libtt_metal.so"), filepath.Join(dir, "ttwork")
	for _, c := range []struct {
		name string
		args []string
		code int
		says string
	}{
		{"leaks", []string{"--fail-on-leak", "--", work, "--scenario", "basic", "--leak"}, 8, "left allocated: more than --fail-on-leak allows (0)"},
		{"clean", []string{"--fail-on-leak", "--", work, "--scenario", "basic"}, 0, ""},
		{"under_threshold", []string{"--fail-on-leak=1G", "--", work, "--scenario", "basic", "--leak"}, 0, ""},
		{"mesh_above_threshold", []string{"--fail-on-leak=64K", "--", work, "--scenario", "mesh", "--leak"}, 8, "more than --fail-on-leak allows (65536)"},
		{"command_fails", []string{"--fail-on-leak", "--", "sh", "-c", "exit 3"}, 3, ""},
		{"bad_size", []string{"--fail-on-leak=lots", "--", "true"}, 2, "--fail-on-leak: \"lots\" is not a number of bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			args := append([]string{"--json", "-o", out, "--lib", lib}, c.args...)
			var stderr strings.Builder
			cmd := exec.Command(bin, args...)
			cmd.Stderr, cmd.Stdout = &stderr, &stderr
			err := cmd.Run()
			if code := exitCode(err); code != c.code {
				t.Fatalf("exit status %d, want %d\n%s", code, c.code, stderr.String())
			}
			if c.says != "" && !strings.Contains(stderr.String(), c.says) {
				t.Errorf("stderr does not say %q:\n%s", c.says, stderr.String())
			}
			if c.code != 8 && strings.Contains(stderr.String(), "more than --fail-on-leak allows") {
				t.Errorf("a passing run says it failed the gate:\n%s", stderr.String())
			}
			if c.code == 8 {
				// What the gate counted is what the summary lists.
				sum := lastSummary(t, out)
				var n int
				var bytes uint64
				for _, p := range sum.Processes {
					for _, l := range append(p.Leaks, p.UnplacedLeaks...) {
						n++
						bytes += l.Size
					}
				}
				if n == 0 || !strings.Contains(stderr.String(), fmt.Sprintf("%d leak(s), %d bytes of device memory left allocated", n, bytes)) {
					t.Errorf("%d leaks in the summary; stderr:\n%s", n, stderr.String())
				}
			}
		})
	}
}
