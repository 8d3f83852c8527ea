package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A name left by tttrace mark is taken once, in the order given, by the
// process it was left for; names older than that process are not.
func TestMarkNames(t *testing.T) {
	start := time.Now()
	var files []string
	for _, n := range []string{"first", "second \x1b[2J"} {
		f, err := writeMarkName(os.Getpid(), n)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	other, err := writeMarkName(os.Getpid()+1<<22, "not mine")
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(other)
	if got := takeMarkNames(start); strings.Join(got, "|") != "first|second \x1b[2J" {
		t.Errorf("names %q", got)
	}
	for _, f := range files {
		if _, err := os.Lstat(f); !os.IsNotExist(err) {
			t.Errorf("%s left behind: %v", f, err)
		}
	}
	if got := takeMarkNames(start); len(got) != 0 {
		t.Errorf("taken twice: %q", got)
	}
	if _, err := writeMarkName(os.Getpid(), "stale"); err != nil {
		t.Fatal(err)
	}
	if got := takeMarkNames(time.Now().Add(time.Hour)); len(got) != 0 {
		t.Errorf("a name older than the process taken: %q", got)
	}
	if _, err := os.Lstat(other); err != nil {
		t.Errorf("another process's name was taken: %v", err)
	}
}

// The mark directory must be the user's own, closed to others.
func TestCheckMarkDir(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o700, true}, {0o755, false}, {0o1777, false}} {
		if err := os.Chmod(dir, c.mode); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = checkMarkDir(fd, dir)
		unix.Close(fd)
		if (err == nil) != c.ok {
			t.Errorf("mode %#o: %v", c.mode, err)
		}
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Open(link, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0); err == nil {
		t.Errorf("a link to a directory opened")
	}
}

func TestMarkCommand(t *testing.T) {
	for _, c := range []struct {
		args   []string
		code   int
		stderr string
	}{
		{[]string{}, ExitUsage, "Usage: tttrace mark PID [NAME]"},
		{[]string{"x"}, ExitUsage, `"x" is not a process id`},
		{[]string{"1", strings.Repeat("n", maxMarkFileBytes+1)}, ExitUsage, "at most 4096 bytes"},
		{[]string{"1"}, ExitUsage, "not tttrace: not signalled"},
		{[]string{"999999999"}, ExitNoProcess, "no such process"},
	} {
		var stdout, stderr bytes.Buffer
		if code := Main(append([]string{"mark"}, c.args...), &stdout, &stderr); code != c.code || !strings.Contains(stderr.String(), c.stderr) {
			t.Errorf("mark %q: exit %d, %q", c.args, code, stderr.String())
		}
	}
}
