package procfs

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"golang.org/x/sys/unix"
)

// TTDevices reads a /dev/tenstorrent made of real character devices and a
// sysfs of links, as the kernel driver makes them.
func TestTTDevices(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root")
	}
	root := t.TempDir()
	dev := filepath.Join(root, "dev", "tenstorrent")
	if err := os.MkdirAll(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, minor uint32, pci, id string) {
		if err := unix.Mknod(filepath.Join(dev, name), unix.S_IFCHR|0o600, int(unix.Mkdev(511, minor))); err != nil {
			t.Skipf("mknod: %v", err)
		}
		if pci == "" {
			return
		}
		pdir := filepath.Join(root, "sys", "devices", "pci0000:00", pci)
		char := filepath.Join(root, "sys", "dev", "char")
		for _, d := range []string{pdir, char} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(pdir, "device"), []byte(id+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cdir := filepath.Join(root, "sys", "devices", "pci0000:00", pci, "tenstorrent", "tenstorrent!"+name)
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../../"+pci, filepath.Join(cdir, "device")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(cdir, filepath.Join(char, "511:"+name)); err != nil {
			t.Fatal(err)
		}
	}
	mk("0", 0, "0000:c1:00.0", "0x401e")
	mk("1", 1, "0000:02:00.0", "0x401e")
	mk("7", 7, "", "")                                                        // no sysfs entry: left out
	if err := os.WriteFile(filepath.Join(dev, "2"), nil, 0o644); err != nil { // not a device
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dev, "README"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := TTDevices(root, filepath.Join(root, "sys"))
	if err != nil {
		t.Fatal(err)
	}
	want := []TTDevice{{0, "0000:c1:00.0", "0x401e", unix.Mkdev(511, 0)}, {1, "0000:02:00.0", "0x401e", unix.Mkdev(511, 1)}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := TTDevices(t.TempDir(), "/sys"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no /dev/tenstorrent: %v", err)
	}
	// A FIFO named /dev/tenstorrent is refused at once, not waited on.
	fifo := t.TempDir()
	if err := os.MkdirAll(filepath.Join(fifo, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(fifo, "dev", "tenstorrent"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := TTDevices(fifo, "/sys"); err == nil {
		t.Error("a FIFO read as /dev/tenstorrent")
	}
}

func TestIsPCIAddress(t *testing.T) {
	for s, want := range map[string]bool{"0000:02:00.0": true, "0000:c1:1f.7": true, "0000:C1:00.0": false, "0000:02:00": false, "../../x": false, "0000:02:00.0x": false} {
		if IsPCIAddress(s) != want {
			t.Errorf("%q: %v", s, !want)
		}
	}
}
