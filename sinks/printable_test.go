package sinks

import (
	"strings"
	"testing"
	"time"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
)

func TestPrintable(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"python3 -m pytest tests/ttnn", "python3 -m pytest tests/ttnn"},
		{"café ☃ 日本", "café ☃ 日本"},
		{"evil\x1b]2;owned\x07\x1b[2J", `evil\x1b]2;owned\x07\x1b[2J`},
		{"a\nb\tc\rd\x7f", `a\x0ab\x09c\x0dd\x7f`},
		{"csi\u009b31m", `csi\u009b31m`},       // C1 CSI, as UTF-8
		{"rtl\u202etxt.so", `rtl\u202etxt.so`}, // a bidi override
		{"bad\xff\xc2utf8", `bad\xff\xc2utf8`}, // not UTF-8
		{"zw\u200bj", `zw\u200bj`},             // zero-width space
	} {
		if got := Printable(c.in); got != c.want {
			t.Errorf("Printable(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	s := "nothing to do here"
	if n := testing.AllocsPerRun(100, func() { _ = Printable(s) }); n != 0 {
		t.Errorf("a clean string allocates %v times", n)
	}
}

func TestPrintableWriter(t *testing.T) {
	var b strings.Builder
	w := PrintableWriter(&b)
	w.Write([]byte("tttrace: pid 7 loaded /tmp/\x1b[31mred.so\n"))
	w.Write([]byte("plain line\n"))
	if got, want := b.String(), "tttrace: pid 7 loaded /tmp/\\x1b[31mred.so\nplain line\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// A command line, a path and a symbol name carrying terminal escapes reach
// neither the report nor the live view raw.
func TestHumanOutputsEscape(t *testing.T) {
	const evil = "./w --x=\x1b]2;owned\x07\x1b[2J\u009b31m"
	l := devices.NewLedger(devices.Options{})
	l.SetProcessInfo(10, devices.ProcessInfo{Command: evil})
	e := chipEv(events.KindAlloc, 10, 0xa, 0, events.DRAM, 64)
	e.Seq, e.Site = 1, 1
	l.Apply(e)
	l.SetSites(10, siteFunc(func(id uint32) (devices.Site, bool) {
		return devices.Site{Site: id, Native: []devices.NativeFrame{{Module: "/tmp/\x1b[31m.so", Function: "f\x1b[0m"}},
			Python: []devices.PyFrame{{File: "/tmp/\x1b[1mt.py", Function: "test_\x07"}}}, true
	}))
	s := l.Summary()
	var out strings.Builder
	if err := writeReport(&out, &s); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	v := NewLive(&strings.Builder{}, time.Millisecond, func() (int, int) { return 200, 0 })
	text += strings.Join(v.frame(&View{Now: time.Unix(1700000000, 0), Ledger: l, Procs: []Proc{{Pid: 10, Command: evil}}}, 200), "\n")
	if !strings.Contains(text, `\x1b]2;owned\x07`) {
		t.Errorf("the command is not shown escaped:\n%s", text)
	}
	for _, bad := range []string{"\x1b", "\x07", "\u009b"} {
		if strings.Contains(text, bad) {
			t.Errorf("%q printed raw:\n%q", bad, text)
		}
	}
}
