package pyprobe

import (
	"os"
	"testing"
)

// TestLoad passes the program, and so bpf/python.h, through the verifier.
func TestLoad(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	o, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	info, err := o.Program().Info()
	if err != nil {
		t.Fatal(err)
	}
	if n, ok := info.VerifiedInstructions(); ok {
		t.Logf("verified instructions: %d", n)
	}
}
