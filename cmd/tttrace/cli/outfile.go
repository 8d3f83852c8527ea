package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// outFile is an output file (-o, --perfetto, --pprof, --folded and their
// snapshots). tttrace runs as root, also as a host-wide service, and is
// often pointed into /tmp, where others can plant files and links, so every
// file it writes is one it has just made itself:
//
//   - a symbolic link at the path is refused, never followed, and so is
//     anything but a regular file or a character device (/dev/null): a FIFO
//     would block tttrace;
//   - the output is written to a new temporary file in the same directory
//     (created exclusively, O_CREAT|O_EXCL, so owned by the user tttrace
//     runs as) and renamed over the path. The rename replaces whatever the
//     path names (a file another user created first, a hard or symbolic
//     link planted there) without opening it: nothing is written through a
//     link, and no output keeps another user's owner or mode. The rename
//     comes when the output is complete, so a crash leaves the old file,
//     never a truncated one; with --all (streamed: tracing runs until
//     stopped, and the file is read as it grows) it comes when the file is
//     made, which then grows in place;
//   - the new file is 0600 whatever the umask; replacing a file of the user
//     tttrace runs as that has no other link, it takes that file's mode and
//     group (an output root made readable to a group stays so);
//   - a character device is written in place: opened without following
//     links or creating, and checked once open;
//   - whether the file can be made is checked up front (newOutFile makes a
//     temporary file and removes it), before tracing starts.
//
// The file is made only when something is written to it or tracing has run
// (Keep): a run that cannot start (no such process, no permission, an
// unknown layout) leaves the file it was given as it was, and no empty file
// behind.
type outFile struct {
	path string
	// device: the path is a character device, written in place.
	device bool
	// streamed: renamed into place when made, then written as it grows.
	streamed bool
	// mode is the new file's mode; gid, unless -1, its group.
	mode   os.FileMode
	gid    int
	f      *os.File
	tmp    string // the temporary file f is, until renamed
	made   bool   // created (or the attempt failed: err)
	err    error
	closed bool
}

// newOutFile checks that path can be an output file; streamed: put it in
// place when made and write it as it grows, rather than rename it into
// place at the end.
func newOutFile(path string, streamed bool) (*outFile, error) {
	o := &outFile{path: path, mode: 0o600, gid: -1, streamed: streamed}
	st, err := os.Lstat(path)
	switch {
	case err == nil:
		if err := o.check(st); err != nil {
			return nil, err
		}
		if err := unix.Access(path, unix.W_OK); err != nil {
			return nil, &os.PathError{Op: "write", Path: path, Err: err}
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && !o.device && int(sys.Uid) == os.Geteuid() && sys.Nlink == 1 {
			o.mode, o.gid = st.Mode().Perm(), int(sys.Gid)
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	if !o.device {
		// The temporary file and the rename need the directory. One is
		// made now: access(2) says yes to root where it cannot create
		// (sysfs, NFS with root squashed).
		f, err := o.temp()
		if err != nil {
			return nil, err
		}
		_ = f.Close()
		_ = os.Remove(f.Name())
	}
	return o, nil
}

// check says whether st, what the path is now, can be the output; a
// character device is written in place (device).
func (o *outFile) check(st os.FileInfo) error {
	switch m := st.Mode(); {
	case m&os.ModeSymlink != 0:
		return fmt.Errorf("%s: is a symbolic link (output files are never followed through links: give the file's own path)", o.path)
	case m.IsDir():
		return fmt.Errorf("%s: is a directory", o.path)
	case m&os.ModeCharDevice != 0:
		// A device node has one link; another one is a link to it
		// planted where tttrace writes (to a disk, say).
		if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Nlink != 1 {
			return fmt.Errorf("%s: a character device with %d links (a link to a device is not written)", o.path, sys.Nlink)
		}
		o.device = true
	case !m.IsRegular():
		return fmt.Errorf("%s: not a regular file", o.path)
	}
	return nil
}

// temp makes a new, empty temporary file next to the path, exclusively
// (os.CreateTemp: O_CREAT|O_EXCL, 0600 under the umask).
func (o *outFile) temp() (*os.File, error) {
	dir, base := filepath.Split(o.path)
	if dir == "" {
		dir = "."
	}
	if len(base) > 200 { // the name and its suffix within NAME_MAX
		base = base[:200]
	}
	f, err := os.CreateTemp(dir, "."+base+".tttrace-*")
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("%s: cannot create files in %s (%w): tttrace writes each output file anew there and renames it into place", o.path, filepath.Clean(dir), err)
	}
	return f, nil
}

// create makes the file the first time it is called.
func (o *outFile) create() error {
	if o.made {
		return o.err
	}
	o.made = true
	if o.device {
		o.f, o.err = o.openDevice()
		return o.err
	}
	f, err := o.temp()
	if err != nil {
		o.err = err
		return err
	}
	o.f, o.tmp = f, f.Name()
	// CreateTemp made it 0600 under the umask; the mode is set exactly.
	err = f.Chmod(o.mode)
	if err == nil && o.gid >= 0 && o.gid != os.Getegid() && os.Geteuid() == 0 {
		err = f.Chown(-1, o.gid)
	}
	if err == nil && o.streamed {
		err = o.place()
	}
	if err != nil {
		o.err = err
		o.discard()
	}
	return o.err
}

// place renames the temporary file over the path. Streamed, the path is
// looked at again first: what became a link or a device since the check is
// refused, as it would have been then (the rename alone would replace it).
func (o *outFile) place() error {
	if o.streamed {
		if st, err := os.Lstat(o.path); err == nil {
			if err := o.check(st); err != nil {
				return err
			}
			if o.device {
				o.device = false
				return fmt.Errorf("%s: changed since it was checked: no longer a regular file", o.path)
			}
		}
	}
	if err := os.Rename(o.tmp, o.path); err != nil {
		return err
	}
	o.tmp = ""
	return nil
}

func (o *outFile) Write(b []byte) (int, error) {
	if o.closed {
		return 0, os.ErrClosed
	}
	if err := o.create(); err != nil {
		return 0, err
	}
	return o.f.Write(b)
}

// Keep makes the file even if nothing was written to it: tracing ran, and
// its output is empty.
func (o *outFile) Keep() error {
	if o.made {
		return o.err
	}
	if err := o.create(); err != nil {
		return err
	}
	if o.closed {
		return o.finish()
	}
	return nil
}

// Close puts the file in place if it was made; it may be called again.
func (o *outFile) Close() error {
	o.closed = true
	return o.finish()
}

// finish closes the file and, unless it is in place already (a device,
// streamed), renames it over the path.
func (o *outFile) finish() error {
	if o.f == nil {
		return nil
	}
	f := o.f
	o.f = nil
	if o.tmp == "" {
		return f.Close()
	}
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = o.place()
	}
	if err != nil {
		_ = os.Remove(o.tmp)
		o.tmp = ""
		return err
	}
	return nil
}

// openDevice opens the character device at the path: never through a
// link, never creating, without blocking (O_NONBLOCK), and checked once
// open to be a character device of one link.
func (o *outFile) openDevice() (*os.File, error) {
	fd, err := unix.Open(o.path, os.O_WRONLY|unix.O_NOFOLLOW|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: o.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), o.path)
	var st unix.Stat_t
	if err = unix.Fstat(fd, &st); err == nil && (st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Nlink != 1) {
		err = fmt.Errorf("%s: changed since it was checked: no longer a character device of one link", o.path)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// discard removes the temporary file.
func (o *outFile) discard() {
	if o.f != nil {
		_ = o.f.Close()
		o.f = nil
	}
	if o.tmp != "" {
		_ = os.Remove(o.tmp)
		o.tmp = ""
	}
}
