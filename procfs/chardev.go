package procfs

import (
	"bufio"
	"bytes"
	"fmt"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// CharDevName is the kernel's name of the character device numbered rdev
// (st_rdev): the DEVNAME of sys's dev/char/MAJOR:MINOR/uevent, the path
// under the host's /dev ("tenstorrent/3"), whatever a process's mount
// namespace calls the node it opened. sys is the host's /sys.
func CharDevName(sys string, rdev uint64) (string, error) {
	path := filepath.Join(sys, "dev", "char", fmt.Sprintf("%d:%d", unix.Major(rdev), unix.Minor(rdev)), "uevent")
	b, err := ReadFile(path, 4096)
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "DEVNAME="); ok {
			if v == "" || len(v) > 255 || strings.ContainsFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
				return "", fmt.Errorf("%s: DEVNAME %q", path, cut(v))
			}
			return v, nil
		}
	}
	return "", fmt.Errorf("%s: no DEVNAME", path)
}
