package procfs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// TTDevice is one Tenstorrent PCIe device a process sees: the N of its
// /dev/tenstorrent/N and the PCI function behind it (docs/ttmetal.md,
// "Physical chips"), as UMD's PCIDevice::enumerate_devices lists them.
type TTDevice struct {
	Num int    // N of /dev/tenstorrent/N
	PCI string // PCI address, "0000:02:00.0"
	// PCIDeviceID: the PCI device id ("0x401e" Wormhole, "0xb140"
	// Blackhole), "" when sysfs does not say.
	PCIDeviceID string
	// Rdev is the character device's number (st_rdev): a process that
	// holds the device open has a file of that number open (HeldDevices).
	Rdev uint64
}

// MaxTTDevices bounds the entries read from a /dev/tenstorrent (a host
// has at most a few dozen).
const MaxTTDevices = 1024

// TTDevices lists the Tenstorrent devices under root's /dev/tenstorrent
// (root: a process's root directory, Root(pid), so a container's devices
// are its own) with the PCI address of each from sys's
// dev/char/MAJOR:MINOR/device link (sys: the host's /sys). Entries whose
// name is not a number, that are not character devices, or whose PCI
// address sysfs does not give are left out, as UMD leaves out the devices
// whose address it cannot read. os.ErrNotExist when root has no
// /dev/tenstorrent.
func TTDevices(root, sys string) ([]TTDevice, error) {
	dir := filepath.Join(root, "dev", "tenstorrent")
	// A directory only, opened without blocking: a process's file system
	// may hold a FIFO by that name.
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	ents, err := f.ReadDir(MaxTTDevices + 1)
	if err != nil && len(ents) == 0 {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, err
	}
	if len(ents) > MaxTTDevices {
		return nil, fmt.Errorf("%s: more than %d entries", dir, MaxTTDevices)
	}
	var out []TTDevice
	for _, e := range ents {
		// UMD takes every all-digit name as a device number.
		if !allDigits(e.Name()) {
			continue
		}
		num, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(filepath.Join(dir, e.Name()), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
			continue
		}
		char := filepath.Join(sys, "dev", "char", fmt.Sprintf("%d:%d", unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))))
		link, err := os.Readlink(filepath.Join(char, "device"))
		if err != nil {
			continue
		}
		pci := filepath.Base(link)
		if !IsPCIAddress(pci) {
			continue
		}
		d := TTDevice{Num: num, PCI: pci, Rdev: uint64(st.Rdev)}
		if b, err := ReadFile(filepath.Join(char, "device", "device"), 64); err == nil {
			d.PCIDeviceID = strings.TrimSpace(string(b))
		}
		out = append(out, d)
	}
	return out, nil
}

func allDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// IsPCIAddress says whether s is a PCI address as sysfs names devices:
// DDDD:BB:DD.F, lower-case hex.
func IsPCIAddress(s string) bool {
	if len(s) != 12 || s[4] != ':' || s[7] != ':' || s[10] != '.' {
		return false
	}
	for i, c := range s {
		if i == 4 || i == 7 || i == 10 {
			continue
		}
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
