package devices

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/tttrace/tttrace/events"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// reportStream is a run with something of everything the report shows.
func reportStream(t *testing.T) *rec {
	r := newRec(t)
	r.l.SetProcessInfo(1000, ProcessInfo{Command: "python -m pytest tests/ttnn", Parent: 1, AttachedMidRun: true})
	r.apply(
		evMeshAlloc(7, 0x55d0c0ffee00, meshA, events.DRAM, 0x20000, 96<<20),
		evView(7, 0, 0x20000), evView(7, 1, 0x20000),
		evAlloc(7, 0x55d0c0ff0000, 0, events.L1, 0x1000, 1536),
		evAlloc(7, 0x55d0c0ff0040, 1, events.L1Small, 0x1000, 64),
		evAlloc(8, 0x55d0c0ff0080, 100, events.Trace, 0x0, 3<<30),
		evAlloc(8, 0x55d0c0ff00c0, 100, events.SystemMemory, 0x0, 1<<30+1<<29),
		evCBLayout(9, progP, 0), evCB(9, 0, 0x10000, 64<<10), evCB(9, 1, 0x10000, 64<<10),
		evFree(8, 0xdead0000, 0), evFree(8, 0x55d0c0ff00c0, 100), evFree(8, 0x55d0c0ff00c0, 100),
		evAlloc(8, 0x55d0c0ff0100, 3, events.DRAM, 0x0, 1<<20),
		evDeviceClose(8, 3),
		evAlloc(8, 0x55d0c0ff0140, 5, events.BufferType(9), 0, 1),
	)
	for i := uint64(0); i < 13; i++ {
		r.apply(evAlloc(10, 0x55d0c1000000+i*0x40, 1, events.DRAM, 0x100000+i*0x1000, 4096))
	}
	lost := evAlloc(10, 0x55d0c2000000, 1, events.L1, 0x40000, 100)
	lost.LostBefore = 3
	r.apply(lost)
	r.apply(evExit(0, 11))

	other := evAlloc(1, 0x55d0c0ffee00, 0, events.DRAM, 0x0, 512)
	other.Pid = 2000
	r.apply(other)
	return r
}

func TestWriteReportGolden(t *testing.T) {
	s := reportStream(t).summary()
	var buf bytes.Buffer
	if err := WriteReport(&buf, &s); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.golden", buf.Bytes())
}

func TestWriteReportEmpty(t *testing.T) {
	s := NewLedger().Summary()
	var buf bytes.Buffer
	if err := WriteReport(&buf, &s); err != nil {
		t.Fatal(err)
	}
	golden(t, "report_empty.golden", buf.Bytes())
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./devices -run Report -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (run with -update to accept):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

type failWriter struct{ n int }

func (w *failWriter) Write(p []byte) (int, error) {
	if w.n += len(p); w.n > 100 {
		return 0, os.ErrClosed
	}
	return len(p), nil
}

func TestWriteReportError(t *testing.T) {
	s := reportStream(t).summary()
	if err := WriteReport(&failWriter{}, &s); err == nil {
		t.Fatal("no error from a failing writer")
	}
}

func TestHuman(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 96 << 20: "96.0 MiB",
		3 << 30: "3.0 GiB", 1 << 40: "1.0 TiB", 1<<64 - 1: "16.0 EiB",
	} {
		if got := human(n); got != want {
			t.Errorf("human(%d) = %q, want %q", n, got, want)
		}
	}
}
