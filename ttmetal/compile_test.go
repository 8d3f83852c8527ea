package ttmetal

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tttrace/tttrace/elfx"
)

// compile writes src to srcName in a temporary directory and builds it with
// cc into out there: cc pre... -o out srcName post...; it returns out's
// path. Skips the test where cc is not installed.
func compile(t *testing.T, cc, srcName, src, out string, pre []string, post ...string) string {
	t.Helper()
	if _, err := exec.LookPath(cc); err != nil {
		t.Skip(cc + " not installed")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, srcName)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	so := filepath.Join(dir, out)
	args := append(append(append([]string{}, pre...), "-o", so, path), post...)
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v\n%s", cc, post, err, b)
	}
	return so
}

// fixtureLayouts compiles src with cc into a shared library with DWARF
// (offsetof of non-standard-layout classes allowed) and returns its
// allocator layouts, and the library open until the test ends.
func fixtureLayouts(t *testing.T, cc, srcName, src string) (*Library, AllocatorLayouts) {
	t.Helper()
	so := compile(t, cc, srcName, src, "libtt_metal.so",
		[]string{"-std=c++17", "-O2", "-g", "-shared", "-fPIC", "-Wno-invalid-offsetof"})
	lib, err := OpenLibrary(so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lib.Close() })
	return lib, AllocatorLayoutsFromDWARF(lib, elfx.Debug{Roots: []string{}})
}
