package ttmetal

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
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
