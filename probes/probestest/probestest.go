// Package probestest holds helpers for tests that need the real BPF path.
package probestest

import (
	"os"
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
