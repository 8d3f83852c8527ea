package cli

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// outFile is an output file (-o, --perfetto) created, and an existing one
// truncated, only when something is written to it or tracing has run
// (Keep): a run that cannot start (no such process, no permission, an
// unknown layout) leaves the file it was given as it was, and no empty
// file behind. Whether it can be written is checked up front.
type outFile struct {
	path   string
	f      *os.File
	made   bool // created (or the attempt failed: err)
	err    error
	closed bool
}

func newOutFile(path string) (*outFile, error) {
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return nil, fmt.Errorf("%s: is a directory", path)
		}
		if err := unix.Access(path, unix.W_OK); err != nil {
			return nil, &os.PathError{Op: "write", Path: path, Err: err}
		}
		return &outFile{path: path}, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	dir := filepath.Dir(path)
	if err := unix.Access(dir, unix.W_OK); err != nil {
		return nil, &os.PathError{Op: "create in", Path: dir, Err: err}
	}
	return &outFile{path: path}, nil
}

// create makes the file the first time it is called.
func (o *outFile) create() error {
	if !o.made {
		o.made = true
		o.f, o.err = os.Create(o.path)
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
		f := o.f
		o.f = nil
		return f.Close()
	}
	return nil
}

// Close closes the file if it was made; it may be called again.
func (o *outFile) Close() error {
	o.closed = true
	if o.f == nil {
		return nil
	}
	f := o.f
	o.f = nil
	return f.Close()
}
