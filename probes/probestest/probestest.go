// Package probestest holds helpers for tests that need the real BPF path.
package probestest

import (
	"os"
	"path/filepath"
	"testing"
)

// RequireRoot skips t when not running as root, except under CI
// (CI=true), where privileged tests must run: there it fails instead.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("privileged test under CI without root: run make test as root")
	}
	t.Skip("needs root (BPF); run make test as root")
}

// Replica returns the directory of the replica build variant (gcc-O2,
// ...) under TTTRACE_REPLICA, which make test sets. Without it the test is
// skipped, except under CI, where it fails.
func Replica(t testing.TB, variant string) string {
	t.Helper()
	dir := os.Getenv("TTTRACE_REPLICA")
	if dir == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TTTRACE_REPLICA unset under CI: run make test")
		}
		t.Skip("TTTRACE_REPLICA unset (make test sets it)")
	}
	dir = filepath.Join(dir, variant)
	if _, err := os.Stat(filepath.Join(dir, "libtt_metal.so")); err != nil {
		t.Fatalf("replica variant %s: %v", variant, err)
	}
	return dir
}
