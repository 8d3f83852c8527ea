package cli

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// brokenSymtab builds a small shared library and makes its .symtab claim
// more bytes than the file holds: the library opens, its symbol scan fails.
func brokenSymtab(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("cc not installed")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "lib.c")
	if err := os.WriteFile(src, []byte("int tttrace_fixture(void) { return 1; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, "libtt_metal.so")
	if out, err := exec.Command("cc", "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Fatalf("cc: %v\n%s", err, out)
	}
	f, err := elf.Open(so)
	if err != nil {
		t.Fatal(err)
	}
	idx := -1
	for i, s := range f.Sections {
		if s.Name == ".symtab" {
			idx = i
		}
	}
	f.Close()
	if idx < 0 {
		t.Fatal("the fixture has no .symtab")
	}
	b, err := os.ReadFile(so)
	if err != nil {
		t.Fatal(err)
	}
	shoff := binary.LittleEndian.Uint64(b[0x28:])
	shentsize := uint64(binary.LittleEndian.Uint16(b[0x3a:]))
	// Elf64_Shdr.sh_size is at byte 32 of the header.
	binary.LittleEndian.PutUint64(b[shoff+uint64(idx)*shentsize+32:], 1<<40)
	if err := os.WriteFile(so, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return so
}

// Doctor runs the same analysis as tracing: a library whose symbol scan
// fails is reported with that error and exit status 6, without a panic
// (doctor once went on with no symbols and dereferenced them).
func TestDoctorSymbolScanFails(t *testing.T) {
	so := brokenSymtab(t)
	for _, args := range [][]string{{so}, {"--json", so}} {
		var out, errOut bytes.Buffer
		status := Doctor(args, &out, &errOut)
		if status != ExitUnsupported {
			t.Errorf("doctor %v: status %d, want %d\n%s%s", args, status, ExitUnsupported, out.String(), errOut.String())
		}
		if !strings.Contains(out.String(), "read symbols of "+so) || !strings.Contains(out.String(), ".symtab") {
			t.Errorf("doctor %v does not say the symbol scan failed:\n%s", args, out.String())
		}
	}
}

// A library path holding terminal controls (ESC, C1 CSI) is written escaped,
// in the human report and in the JSON one.
func TestDoctorEscapesPath(t *testing.T) {
	so := brokenSymtab(t)
	dir := filepath.Join(filepath.Dir(so), "a\x1b]0;pwned\x07b\u009b31m")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	hostile := filepath.Join(dir, "libtt_metal.so")
	if err := os.Rename(so, hostile); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{hostile}, {"--json", hostile}} {
		var out, errOut bytes.Buffer
		Doctor(args, &out, &errOut)
		all := out.String() + errOut.String()
		if !strings.Contains(all, "libtt_metal.so") {
			t.Fatalf("doctor %q does not name the library:\n%s", args, all)
		}
		for _, raw := range []string{"\x1b", "\x07", "\u009b"} {
			if strings.Contains(all, raw) {
				t.Errorf("doctor %q writes %q raw:\n%q", args, raw, all)
			}
		}
	}
}
