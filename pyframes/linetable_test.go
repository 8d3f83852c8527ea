package pyframes

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// TestLineTables decodes the line tables of real code objects compiled by
// every interpreter found and compares each instruction's line with the
// one the interpreter itself gives (code.co_lines()).
func TestLineTables(t *testing.T) {
	interps := findInterpreters(t)
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..")
	sources, _ := filepath.Glob(filepath.Join(root, "testdata/pyframes/*.py"))
	// Some big, varied modules of the standard library as well.
	for _, py := range interps {
		t.Run(filepath.Base(py.path)+"-"+py.version, func(t *testing.T) {
			args := append([]string{filepath.Join(root, "testdata/pyframes/lines.py")}, sources...)
			stdlib, err := exec.Command(py.path, "-c", "import os,sys;print(os.path.dirname(os.__file__))").Output()
			if err != nil {
				t.Fatal(err)
			}
			dir := string(bytes.TrimSpace(stdlib))
			args = append(args, filepath.Join(dir, "argparse.py"), filepath.Join(dir, "dataclasses.py"), filepath.Join(dir, "inspect.py"))
			out, err := exec.Command(py.path, args...).Output()
			if err != nil {
				t.Fatal(err)
			}
			minor := py.minor
			codes, instrs := 0, 0
			sc := bufio.NewScanner(bytes.NewReader(out))
			sc.Buffer(nil, 64<<20)
			for sc.Scan() {
				var c struct {
					Name        string
					Firstlineno int
					Linetable   string
					Lines       [][2]int
				}
				if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
					t.Fatal(err)
				}
				table, _ := hex.DecodeString(c.Linetable)
				codes++
				bad := 0
				for _, l := range c.Lines {
					instrs++
					var got int
					if minor == 10 {
						got = line310(table, c.Firstlineno, l[0])
					} else {
						got = line311(table, c.Firstlineno, l[0])
					}
					if got != l[1] {
						if bad++; bad <= 3 {
							t.Errorf("%s (first line %d) offset %d: line %d, interpreter says %d", c.Name, c.Firstlineno, l[0], got, l[1])
						}
					}
				}
			}
			if codes < 100 || instrs < 10000 {
				t.Fatalf("only %d code objects, %d instructions checked", codes, instrs)
			}
			t.Logf("%d code objects, %d instructions agree", codes, instrs)
		})
	}
}
