package cli

import (
	"io"
	"strings"
	"testing"
)

func TestByteSize(t *testing.T) {
	for _, c := range []struct {
		in    string
		pow2  bool
		want  uint64
		str   string
		error string
	}{
		{"0", false, 0, "0", ""},
		{"4096", false, 4096, "4K", ""},
		{"100", false, 100, "100", ""},
		{"64K", false, 64 << 10, "64K", ""},
		{"64kib", false, 64 << 10, "64K", ""},
		{"3MB", false, 3 << 20, "3M", ""},
		{" 1G ", false, 1 << 30, "1G", ""},
		{"1536K", false, 1536 << 10, "1536K", ""},
		{"lots", false, 0, "", `"lots" is not a number of bytes`},
		{"-1", false, 0, "", `"-1" is not a number of bytes`},
		{"4294967297G", false, 0, "", `"4294967297G" is not a number of bytes`},
		{"64M", true, 64 << 20, "64M", ""},
		{"3M", true, 0, "", "3M is not a power of two"},
		{"0", true, 0, "", "0 is not a power of two"},
	} {
		b := ByteSize{powerOfTwo: c.pow2}
		err := b.Set(c.in)
		switch {
		case c.error != "":
			if err == nil || err.Error() != c.error {
				t.Errorf("Set(%q): error %v, want %q", c.in, err, c.error)
			}
		case err != nil:
			t.Errorf("Set(%q): %v", c.in, err)
		case b.Bytes() != c.want || b.String() != c.str:
			t.Errorf("Set(%q): %d %q, want %d %q", c.in, b.Bytes(), b.String(), c.want, c.str)
		}
	}
}

// The byte-size flags parse into bytes once, and a bad one is refused in
// the flag's own words.
func TestByteSizeFlags(t *testing.T) {
	f, err := Parse([]string{"--ring-size", "16M", "--l1-warn", "64K", "--fail-on-leak", "--", "true"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if f.RingSize.Bytes() != 16<<20 || f.L1Warn.Bytes() != 64<<10 || !f.FailOnLeakSet || f.FailOnLeak.Bytes() != 0 {
		t.Errorf("ring %d, l1-warn %d, fail-on-leak %v %d", f.RingSize.Bytes(), f.L1Warn.Bytes(), f.FailOnLeakSet, f.FailOnLeak.Bytes())
	}
	f, err = Parse([]string{"--", "true"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if f.RingSize.Bytes() != 64<<20 || f.L1Warn.Bytes() != 0 || f.FailOnLeakSet {
		t.Errorf("defaults: ring %d, l1-warn %d, fail-on-leak %v", f.RingSize.Bytes(), f.L1Warn.Bytes(), f.FailOnLeakSet)
	}
	for args, want := range map[string]string{
		"--fail-on-leak=lots": `--fail-on-leak: "lots" is not a number of bytes`,
		"--ring-size=3M":      "--ring-size: 3M is not a power of two",
		"--l1-warn=1X":        `--l1-warn: "1X" is not a number of bytes`,
	} {
		_, err := Parse([]string{args, "--", "true"}, io.Discard)
		if _, ok := err.(usageError); !ok || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want a usage error saying %q", args, err, want)
		}
	}
}
