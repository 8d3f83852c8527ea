package perfetto_test

import (
	"bytes"
	"os"
	"os/exec"
	"testing"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks/perfetto/perfettotest"
)

// protoc is Debian's protoc (protobuf-compiler); the test skips without
// it, except under CI.
func protoc(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("protoc")
	if err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("protoc not found: install Debian's protobuf-compiler (scripts/deps.sh test)")
	}
	t.Skip("protoc not found (apt-get install protobuf-compiler)")
	return ""
}

// trace writes one timeline of the random workload.
func timeline(t *testing.T, seed uint64) []byte {
	var out bytes.Buffer
	s := newStream(t, &out, seed)
	s.l.SetProcessInfo(100, devices.ProcessInfo{Command: "/opt/bin/work --x"})
	s.workload(100, 1200)
	s.emit(events.Event{Kind: events.KindExit, Pid: 100, Chip: -1})
	sum := s.l.Summary()
	if err := s.w.Summary(&sum); err != nil {
		t.Fatal(err)
	}
	if err := s.w.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// The timeline decoded by protoc with Perfetto's official schema: no
// field the schema does not know, a clock snapshot, every chip's and
// type's track where tttrace orders it; two files concatenated (cat a b)
// declare no uuid twice.
func TestOfficialSchema(t *testing.T) {
	pc := protoc(t)
	a, b := timeline(t, 1), timeline(t, 2)
	var descs []map[uint64]*perfettotest.Desc
	total := 0
	for _, f := range [][]byte{a, b} {
		ps, err := perfettotest.Protoc(pc, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range perfettotest.CheckSchema(ps) {
			t.Error(p)
		}
		total += len(ps)
		descs = append(descs, perfettotest.Descriptors(ps))
	}
	if len(descs[0]) < 10 {
		t.Fatalf("only %d tracks", len(descs[0]))
	}
	for u := range descs[0] {
		if descs[1][u] != nil {
			t.Errorf("uuid %d declared in both files", u)
		}
	}
	ps, err := perfettotest.Protoc(pc, append(append([]byte{}, a...), b...))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != total {
		t.Errorf("cat a b: %d packets, the files have %d", len(ps), total)
	}
	for _, p := range perfettotest.CheckSchema(ps) {
		t.Error("cat a b: " + p)
	}
}
