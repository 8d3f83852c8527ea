package procfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseCgroups(t *testing.T) {
	hybrid := "9:name=systemd:/\n4:memory:/kubepods/burstable/pod1/abc\n1:cpu,cpuacct:/\n0::/\n"
	got, err := ParseCgroups([]byte(hybrid))
	if err != nil {
		t.Fatal(err)
	}
	want := []CgroupEntry{{9, "name=systemd", "/"}, {4, "memory", "/kubepods/burstable/pod1/abc"}, {1, "cpu,cpuacct", "/"}, {0, "", "/"}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	if got, err := ParseCgroups([]byte("0::/../../kubepods-pod1.slice/x.scope")); err != nil || got[0].Path != "/../../kubepods-pod1.slice/x.scope" {
		t.Errorf("relative path: %+v %v", got, err)
	}
	for _, bad := range []string{
		"",
		"\n",
		"0::/a\n0::/kubepods.slice/b", // a cgroup named with a newline makes a line of its own
		"0:/a",
		"x::/a",
		"-1::/a",
		"01::/a",
		"0::a",
		"0::/a\x01b",
		"0:mem ory:/a",
		"1234567::/a",
		strings.Repeat("1::/\n", 2),
		strings.Repeat("0::/a/\n", MaxCgroupLines+1),
		"0::/" + strings.Repeat("a", MaxCgroupFile),
	} {
		if _, err := ParseCgroups([]byte(bad)); !errors.Is(err, ErrCgroupFormat) {
			t.Errorf("%.40q: %v, want ErrCgroupFormat", bad, err)
		}
	}
}

func TestCgroupsSelf(t *testing.T) {
	es, err := Cgroups(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if len(es) == 0 {
		t.Fatal("no cgroup")
	}
	if _, err := Cgroups(1 << 30); !errors.Is(err, ErrNoProcess) {
		t.Errorf("a pid that does not exist: %v", err)
	}
}

func FuzzParseCgroups(f *testing.F) {
	f.Add([]byte("0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-a.scope\n"))
	f.Add([]byte("12:memory:/kubepods/pod1/a\n0::/\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := ParseCgroups(b)
		if err != nil {
			return
		}
		seen := map[int]bool{}
		for _, e := range es {
			if seen[e.ID] || !strings.HasPrefix(e.Path, "/") || strings.ContainsAny(e.Path, "\n\x00") {
				t.Fatalf("%q: %+v", b, es)
			}
			seen[e.ID] = true
		}
	})
}

func TestCharDevName(t *testing.T) {
	sys := t.TempDir()
	rdev := unix.Mkdev(511, 3)
	dir := filepath.Join(sys, "dev", "char", "511:3")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, "uevent"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("MAJOR=511\nMINOR=3\nDEVNAME=tenstorrent/3\n")
	if n, err := CharDevName(sys, rdev); err != nil || n != "tenstorrent/3" {
		t.Errorf("%q, %v", n, err)
	}
	for _, bad := range []string{"MAJOR=511\n", "DEVNAME=\n", "DEVNAME=a b\n", "DEVNAME=" + strings.Repeat("x", 300) + "\n"} {
		write(bad)
		if n, err := CharDevName(sys, rdev); err == nil {
			t.Errorf("%q: %q", bad, n)
		}
	}
	if _, err := CharDevName(sys, unix.Mkdev(1, 1)); err == nil {
		t.Error("no such device: no error")
	}
}
