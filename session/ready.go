package session

import (
	"fmt"
	"os"
	"path/filepath"
)

// writeReady makes the ready file once the probes are attached. tttrace
// runs as root and the file is often in /tmp, so, as every output file: a
// symbolic link at path is refused, and the file is made anew (a temporary
// file created exclusively, mode 0600, owned by tttrace's user) and renamed
// over path. The rename replaces a file another user made first, or a hard
// link planted there, without opening it: what it named is never written.
func writeReady(path string) error {
	if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%s: is a symbolic link (never followed)", path)
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tttrace-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.WriteString("ready\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}
