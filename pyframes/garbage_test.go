package pyframes

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/tttrace/tttrace/pyframes/internal/pyprobe"
)

// TestCaptureGarbage gives the capture wrong offsets, as a layout nobody
// checked would: the traced script must run as if untraced, the capture
// must end in a flag or a partial stack, and every frame that symbolizes
// must still be the true one (a wrong offset never makes a wrong line).
func TestCaptureGarbage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for BPF")
	}
	interps := findInterpreters(t)
	so := targetLibrary(t)
	objs, rd, done := probeTarget(t, so, pyprobe.Options{})
	defer done()
	script := testScript("stacks.py")
	corruptions := []struct {
		name string
		f    func(*procWire)
	}{
		// Not garbage: the frame fields read one by one, the path taken
		// when a frame's window crosses into unmapped memory. Every
		// stack must be complete.
		{"no frame window", func(v *procWire) { v.FrameWindow = -1 }},
		{"runtime+8", func(v *procWire) { v.Runtime += 8 }},
		{"runtime unmapped", func(v *procWire) { v.Runtime = 8 }},
		{"tstate.thread+8", func(v *procWire) { v.TsThread += 8 }},
		{"frame.previous+8", func(v *procWire) { v.FramePrevious += 8 }},
		{"frame.code+8", func(v *procWire) { v.FrameCode += 8 }},
		{"frame.instr+8", func(v *procWire) { v.FrameInstr += 8 }},
		{"code.linetable+8", func(v *procWire) { v.CodeLinetable += 8 }},
	}
	for _, py := range interps {
		for _, c := range corruptions {
			if py.minor == 10 && c.name == "frame.instr+8" {
				// 3.10's f_lasti is an int: a wrong field holding a
				// small int passes every check at run time. Only the
				// offset checks of Detect stand between it and a wrong
				// line (docs/python.md).
				continue
			}
			t.Run(py.version+"/"+c.name, func(t *testing.T) {
				if good := garbageOne(t, py, script, so, objs, rd, c.f); c.name == "no frame window" && good != scriptCalls {
					t.Errorf("%d of %d stacks complete", good, scriptCalls)
				}
			})
		}
	}
}

// garbageOne runs the script with corrupted offsets and returns how many
// of its stacks came back complete.
func garbageOne(t *testing.T, py testInterp, script, so string, objs *pyprobe.Objects, rd *ringbuf.Reader, corrupt func(*procWire)) int {
	truthFile := filepath.Join(t.TempDir(), "truth.json")
	cmd := exec.Command(py.path, script, so, truthFile)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	out := bufio.NewReader(stdout)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if line, _ := out.ReadString('\n'); line != "ready\n" {
		t.Fatalf("script: %q", line)
	}
	pid := cmd.Process.Pid
	proc, err := ForProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	defer proc.Close()
	v, err := proc.procValue()
	if err != nil {
		t.Fatal(err)
	}
	corrupt(&v)
	var val bytes.Buffer
	binary.Write(&val, binary.LittleEndian, &v)
	key := uint32(pid)
	if err := objs.Procs().Put(&key, val.Bytes()); err != nil {
		t.Fatal(err)
	}
	defer objs.Procs().Delete(&key)
	fmt.Fprintln(stdin, "go")
	recs := newProbeRecords(pid)
	stacks, codes := recs.stacks, &recs.codes
	deadline := time.Now().Add(30 * time.Second)
	for len(stacks) < scriptCalls {
		rd.SetDeadline(deadline)
		rec, err := rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("only %d of %d calls seen", len(stacks), scriptCalls)
		}
		if err != nil {
			t.Fatal(err)
		}
		recs.add(t, rec.RawSample)
	}
	if line, _ := out.ReadString('\n'); line != "done\n" {
		t.Fatalf("script: %q", line)
	}
	fmt.Fprintln(stdin, "exit")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the traced script failed: %v", err)
	}
	var truth map[string][][3]any
	b, _ := os.ReadFile(truthFile)
	if err := json.Unmarshal(b, &truth); err != nil {
		t.Fatal(err)
	}
	rejected := 0
	for i := range *codes {
		if proc.AddCode(&(*codes)[i]) != nil {
			rejected++
		}
	}
	good := 0
	for tag := int64(1); tag <= scriptCalls; tag++ {
		want := truth[fmt.Sprint(tag)]
		raw := stacks[tag]
		s := proc.Symbolize(raw)
		for i, f := range s.Frames {
			if i >= len(want) {
				t.Errorf("call %d: frame %d beyond the true stack: %+v", tag, i, f)
				continue
			}
			w := want[i]
			if f.File != w[0].(string) || f.Function != w[1].(string) || float64(f.Line) != w[2].(float64) {
				t.Errorf("call %d frame %d: %s %s:%d, want %s %s:%v", tag, i, f.Function, f.File, f.Line, w[1], w[0], w[2])
			}
		}
		if len(s.Frames) == min(len(want), MaxFrames) && s.Err == nil {
			good++
		}
		t.Logf("call %d: flags %#x, %d raw frames, %d symbolized, err %v", tag, raw.Flags, len(raw.Frames), len(s.Frames), s.Err)
	}
	t.Logf("%d code records, %d rejected; %d of %d stacks complete", len(*codes), rejected, good, scriptCalls)
	return good
}
