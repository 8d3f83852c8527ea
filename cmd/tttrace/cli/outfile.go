package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// outFile is an output file (-o, --perfetto). tttrace runs as root and is
// often pointed into /tmp, where others can plant links, so:
//
//   - a symbolic link at the path is refused, never followed, and so is
//     anything but a regular file or a character device (/dev/null): a FIFO
//     would block tttrace;
//   - a regular file is written to a new temporary file in the same
//     directory (created exclusively, mode 0600) and renamed over the path
//     when it is complete, so a crash leaves the old file, never a truncated
//     one, and a link planted meanwhile is replaced, not followed. With
//     --all (streamed: tracing runs until stopped, and the file is read as
//     it grows) it is written in place instead, opened with O_NOFOLLOW and
//     checked to be a regular file once open;
//   - a new file gets mode 0600; an existing one keeps its mode and owner;
//   - whether it can be written is checked up front (newOutFile), before
//     tracing starts.
//
// The file is made only when something is written to it or tracing has run
// (Keep): a run that cannot start (no such process, no permission, an
// unknown layout) leaves the file it was given as it was, and no empty file
// behind.
type outFile struct {
	path string
	// device: the path is a character device, written in place.
	device bool
	// streamed: a regular file written in place (--all).
	streamed bool
	// For a regular file: the mode and owner of the file it replaces.
	mode     os.FileMode
	exists   bool
	uid, gid int
	f        *os.File
	tmp      string // the temporary file f is, until renamed
	made     bool   // created (or the attempt failed: err)
	err      error
	closed   bool
}

// newOutFile checks that path can be an output file; streamed: write it in
// place as it grows rather than rename it into place at the end.
func newOutFile(path string, streamed bool) (*outFile, error) {
	o := &outFile{path: path, mode: 0o600, streamed: streamed}
	st, err := os.Lstat(path)
	switch {
	case err == nil:
		switch m := st.Mode(); {
		case m&os.ModeSymlink != 0:
			return nil, fmt.Errorf("%s: is a symbolic link (output files are never followed through links: give the file's own path)", path)
		case m.IsDir():
			return nil, fmt.Errorf("%s: is a directory", path)
		case m&os.ModeCharDevice != 0:
			o.device = true
		case !m.IsRegular():
			return nil, fmt.Errorf("%s: not a regular file", path)
		}
		if err := unix.Access(path, unix.W_OK); err != nil {
			return nil, &os.PathError{Op: "write", Path: path, Err: err}
		}
		if !o.device {
			o.exists, o.mode = true, st.Mode().Perm()
			if sys, ok := st.Sys().(*syscall.Stat_t); ok {
				o.uid, o.gid = int(sys.Uid), int(sys.Gid)
			}
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	}
	if !o.device {
		// The temporary file and the rename need the directory.
		dir := filepath.Dir(path)
		if err := unix.Access(dir, unix.W_OK|unix.X_OK); err != nil {
			return nil, &os.PathError{Op: "create in", Path: dir, Err: err}
		}
	}
	return o, nil
}

// create makes the file the first time it is called.
func (o *outFile) create() error {
	if o.made {
		return o.err
	}
	o.made = true
	if o.device || o.streamed {
		o.f, o.err = o.openInPlace()
		return o.err
	}
	f, err := os.CreateTemp(filepath.Dir(o.path), "."+filepath.Base(o.path)+".tttrace-*")
	if err != nil {
		o.err = err
		return err
	}
	o.f, o.tmp = f, f.Name()
	// CreateTemp made it 0600 under the umask; the mode is set exactly.
	err = f.Chmod(o.mode)
	if err == nil && o.exists && os.Geteuid() == 0 {
		err = f.Chown(o.uid, o.gid)
	}
	if err != nil {
		o.err = err
		o.discard()
	}
	return o.err
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

// finish closes the file and renames it over the path.
func (o *outFile) finish() error {
	if o.f == nil {
		return nil
	}
	f := o.f
	o.f = nil
	if o.device || o.streamed {
		return f.Close()
	}
	err := f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(o.tmp, o.path)
	}
	if err != nil {
		_ = os.Remove(o.tmp)
		return err
	}
	o.tmp = ""
	return nil
}

// openInPlace opens the path itself: never through a link, a new file
// 0600, a regular file truncated only once it is known to be one (a FIFO
// or device planted since the check does not block: O_NONBLOCK).
func (o *outFile) openInPlace() (*os.File, error) {
	flags := os.O_WRONLY | unix.O_NOFOLLOW | unix.O_NOCTTY | unix.O_NONBLOCK
	if !o.device {
		flags |= os.O_CREATE
	}
	fd, err := unix.Open(o.path, flags|unix.O_CLOEXEC, uint32(o.mode))
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: o.path, Err: err}
	}
	f := os.NewFile(uintptr(fd), o.path)
	st, err := f.Stat()
	switch {
	case err != nil:
	case o.device && st.Mode()&os.ModeCharDevice == 0, !o.device && !st.Mode().IsRegular():
		err = fmt.Errorf("%s: changed since it was checked: no longer a %s", o.path, map[bool]string{true: "character device", false: "regular file"}[o.device])
	case !o.device:
		err = f.Truncate(0)
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
