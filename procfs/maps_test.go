package procfs

import (
	"os"
	"testing"
)

// The three parsers this one replaced disagreed on paths with spaces: two
// joined the fields after the inode with one space, so "/a  b.so" became
// "/a b.so" (a file that does not exist, or another one).
func TestParseMaps(t *testing.T) {
	m, err := ParseMaps([]byte("7f00-7f10 r-xp 00001000 fd:01 42   /a path/with spaces.so (deleted)\n" +
		"7ffd0000-7ffd1000 rw-p 00000000 00:00 0                          [stack]\n" +
		"1000-2000 ---p 00000000 00:00 0\n" +
		"3000-4000 r-xp 00000000 08:02 7                          /opt/two  spaces/lib tt.so \n" +
		"5000-6000 r--p 00000000 08:02 8 /x\\012y.so"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Mapping{
		{Start: 0x7f00, End: 0x7f10, Offset: 0x1000, Perms: "r-xp", Dev: "fd:01", Inode: 42, Path: "/a path/with spaces.so (deleted)"},
		{Start: 0x7ffd0000, End: 0x7ffd1000, Perms: "rw-p", Dev: "00:00", Path: "[stack]"},
		{Start: 0x1000, End: 0x2000, Perms: "---p", Dev: "00:00"},
		{Start: 0x3000, End: 0x4000, Perms: "r-xp", Dev: "08:02", Inode: 7, Path: "/opt/two  spaces/lib tt.so "},
		{Start: 0x5000, End: 0x6000, Perms: "r--p", Dev: "08:02", Inode: 8, Path: "/x\\012y.so"},
	}
	if len(m) != len(want) {
		t.Fatalf("%+v", m)
	}
	for i := range want {
		if m[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, m[i], want[i])
		}
	}
	if !m[0].Deleted() || m[3].Deleted() || !m[3].Exec() || m[1].File() || !m[3].File() {
		t.Errorf("predicates: %+v", m)
	}
	for _, bad := range []string{"zz-1 r-xp 0 0 0 /x", "1000 r-xp 0 0 0", "1-2 r-xp 0 0"} {
		if _, err := ParseMaps([]byte(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// A real process's maps: this one's, where every file path must name a
// file that exists.
func TestMapsSelf(t *testing.T) {
	maps, err := Maps(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range maps {
		if !m.File() || m.Deleted() {
			continue
		}
		n++
		if _, err := os.Stat(m.Path); err != nil {
			t.Errorf("%s: %v", m.Path, err)
		}
	}
	if n == 0 {
		t.Fatal("no file mappings")
	}
}

// FuzzParseMaps: any text parses or errs, never panics.
func FuzzParseMaps(f *testing.F) {
	if b, err := os.ReadFile("/proc/self/maps"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("7f00-7f10 r-xp 00001000 fd:01 42   /a path/with spaces.so (deleted)\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ParseMaps(b)
	})
}
