package procfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

func rdevOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Skipf("%s: %v", path, err)
	}
	return uint64(st.Rdev)
}

// HeldDevices finds the character devices a process holds open by the
// files themselves: this process holding /dev/full, not /dev/zero.
func TestHeldDevices(t *testing.T) {
	full, zero := rdevOf(t, "/dev/full"), rdevOf(t, "/dev/zero")
	f, err := os.Open("/dev/full")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	held, err := HeldDevices(os.Getpid(), []uint64{full, zero})
	if err != nil || !reflect.DeepEqual(held, map[uint64]bool{full: true}) {
		t.Errorf("held %v (%v), want /dev/full %#x only", held, err, full)
	}
	if _, err := HeldDevices(1<<30, []uint64{full}); !errors.Is(err, ErrNoProcess) {
		t.Errorf("no process: %v", err)
	}
}

// A crafted fd directory: links whose text names a device count nothing
// unless they lead to it; more entries than MaxFDs are not all looked at.
func TestHeldDevicesCrafted(t *testing.T) {
	full, zero := rdevOf(t, "/dev/full"), rdevOf(t, "/dev/zero")
	dir := t.TempDir()
	lie := filepath.Join(t.TempDir(), "dev", "tenstorrent")
	if err := os.MkdirAll(lie, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lie, "0"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for n, target := range map[string]string{"0": "/dev/null", "3": filepath.Join(lie, "0"), "4": "/nonexistent/dev/tenstorrent/1", "5": "/dev/full"} {
		if err := os.Symlink(target, filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	held, err := heldDevices(dir, []uint64{full, zero})
	if err != nil || !reflect.DeepEqual(held, map[uint64]bool{full: true}) {
		t.Errorf("held %v (%v), want /dev/full only", held, err)
	}
	many := t.TempDir()
	for i := range MaxFDs + 1 {
		if err := os.Symlink("/dev/null", filepath.Join(many, fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := heldDevices(many, []uint64{zero}); !errors.Is(err, ErrTooManyFDs) {
		t.Errorf("%d entries: %v", MaxFDs+1, err)
	}
}
