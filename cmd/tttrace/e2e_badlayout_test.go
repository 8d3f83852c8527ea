package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestE2EWrongLayoutExits: a layout that reads buffer_type_ from the wrong
// place (here size_'s low bytes) yields impossible buffer types: tttrace
// says at once that the library's numbers cannot be trusted and exits 12,
// never 0 with an empty ledger.
func TestE2EWrongLayoutExits(t *testing.T) {
	bin, replica := setup(t)
	dir := filepath.Join(replica, "gcc-O2")
	tmp := t.TempDir()
	layout, out := filepath.Join(tmp, "wrong.json"), filepath.Join(tmp, "out")
	os.WriteFile(layout, []byte(`{"name":"wrong","buffer_impl_ptr":-1,"device":16,"size":24,"buffer_type":24,`+
		`"owns_data":43,"allocation_status":72,"hooked_allocation":73,"address":80,"page_size":88,"device_id":8}`), 0o644)
	var stderr bytes.Buffer
	cmd := exec.Command(bin, "--json", "-o", out, "--layout", layout, "--lib", filepath.Join(dir, "libtt_metal.so"), "--",
		filepath.Join(dir, "ttwork"), "--scenario", "basic", "--leak")
	cmd.Stderr = &stderr
	err := cmd.Run()
	if code := exitCode(err); code != 12 {
		t.Fatalf("exit status %d, want 12\n%s", code, stderr.String())
	}
	for _, want := range []string{"does not fit this library", "cannot be trusted"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
		}
	}
	sum := lastSummary(t, out)
	if sum.LayoutAnomalies == 0 {
		t.Errorf("summary layout_anomalies = 0")
	}
	var bad uint64
	for _, p := range sum.Processes {
		bad += p.AnomalyCounts["invalid_buffer_type"]
	}
	if bad != sum.LayoutAnomalies {
		t.Errorf("layout_anomalies %d, invalid_buffer_type %d", sum.LayoutAnomalies, bad)
	}
}
