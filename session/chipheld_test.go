package session

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
)

// heldRoot makes DIR/dev/tenstorrent/N for each N -> PCI address of devs,
// each a character device with the number of the host's device named by
// rdevs[N] (so that a process holds "it" open by opening that one), and
// the sysfs links the kernel driver makes.
func heldRoot(t *testing.T, devs map[int]string, rdevs map[int]string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root")
	}
	root := t.TempDir()
	dev := filepath.Join(root, "dev", "tenstorrent")
	char := filepath.Join(root, "sys", "dev", "char")
	for _, d := range []string{dev, char} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for n, pci := range devs {
		var st unix.Stat_t
		if err := unix.Stat(rdevs[n], &st); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mknod(filepath.Join(dev, fmt.Sprint(n)), unix.S_IFCHR|0o600, int(st.Rdev)); err != nil {
			t.Fatalf("mknod: %v", err)
		}
		pdir := filepath.Join(root, "sys", "devices", "pci0000:00", pci)
		cdir := filepath.Join(pdir, "tenstorrent", fmt.Sprintf("tenstorrent!%d", n))
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pdir, "device"), []byte("0x401e\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../../"+pci, filepath.Join(cdir, "device")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(cdir, filepath.Join(char, fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))))); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// heldProc starts a real process with TT_VISIBLE_DEVICES=visible ("-":
// unset) holding the files hold open (after a line on its standard input
// when late), and returns its pid and, when late, what opens them.
func heldProc(t *testing.T, visible string, late bool, hold ...string) (int, func()) {
	t.Helper()
	script := "exec sleep 60"
	if late {
		var redir []string
		for i, p := range hold {
			redir = append(redir, fmt.Sprintf("exec %d<%s", 3+i, p))
		}
		script = "read x; " + strings.Join(redir, "; ") + "; echo opened; exec sleep 60"
		hold = nil
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if visible != "-" {
		cmd.Env = append(cmd.Env, "TT_VISIBLE_DEVICES="+visible)
	}
	for _, p := range hold {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, f)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	open := func() {
		io.WriteString(in, "go\n")
		if l, err := bufio.NewReader(out).ReadString('\n'); err != nil || l != "opened\n" {
			t.Errorf("pid %d did not open %v: %q %v", cmd.Process.Pid, hold, l, err)
		}
	}
	return cmd.Process.Pid, open
}

// Finding 12 of issue #32: a process counts on a physical chip only if it
// holds that chip's device open. Every process here says
// TT_VISIBLE_DEVICES=0 (or 1), and calls its chip 0; only those holding
// the device it names are that chip, host-wide.
func TestRunChipsHeld(t *testing.T) {
	// /dev/tenstorrent/1 (0000:02:00.0, first by address) is /dev/full's
	// number, /dev/tenstorrent/0 (0000:05:00.0) /dev/zero's.
	root := heldRoot(t, map[int]string{0: "0000:05:00.0", 1: "0000:02:00.0"}, map[int]string{0: "/dev/zero", 1: "/dev/full"})
	every := heldEvery
	heldEvery = 0
	t.Cleanup(func() { heldEvery = every })

	holder, _ := heldProc(t, "0", false, "/dev/full") // chip 0 is 0000:02:00.0, held
	claimer, _ := heldProc(t, "0", false)             // says so, holds nothing
	other, _ := heldProc(t, "0", false, "/dev/zero")  // holds another chip
	second, _ := heldProc(t, "1", false, "/dev/zero") // chip 0 is 0000:05:00.0, held
	late, open := heldProc(t, "-", true, "/dev/full") // opens it after tttrace attached
	lateClaim, _ := heldProc(t, "-", false)           // all of them by default, holds none
	pids := []int{holder, claimer, other, second, late, lateClaim}

	const lib = "/opt/tt/libtt_metal.so"
	h := newFakeHost()
	var script []step
	for i, pid := range pids {
		h.load(pid, lib)()
		if pid == late {
			script = append(script, do(open))
		}
		script = append(script, alloc(uint32(pid), 0xb0+uint64(i), 0, events.DRAM, 0x1000, 4096), idle)
	}
	for _, pid := range pids {
		script = append(script, do(h.end(pid, 0, 0)))
	}
	be := newFakeBackend(script...)
	be.attach[lib] = nil
	r := &recorder{}
	if _, err := run(context.Background(), Config{PIDs: pids, DevRoot: root}, be, h, []sinks.Sink{r}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		pid  int
		name string
		uid  string // "": not counted on any chip
	}{
		{holder, "holds /dev/tenstorrent/1", "0000:02:00.0"},
		{claimer, "holds nothing", ""},
		{other, "holds another chip's device", ""},
		{second, "holds /dev/tenstorrent/0", "0000:05:00.0"},
		{late, "opened it after the attach, before allocating", "0000:02:00.0"},
		{lateClaim, "sees every device, holds none", ""},
	} {
		d := device(t, r.summary, uint32(c.pid), 0)
		switch {
		case c.uid == "" && (d.UID != nil || d.PCI != "" || !strings.Contains(d.Why, "/dev/tenstorrent/1")):
			t.Errorf("pid %d (%s): chip 0 is %+v, want not counted, with why", c.pid, c.name, d.ChipIdentity)
		case c.uid != "" && (d.UID == nil || *d.UID != c.uid || d.Why != ""):
			t.Errorf("pid %d (%s): chip 0 is %+v, want %s", c.pid, c.name, d.ChipIdentity, c.uid)
		}
	}
}
