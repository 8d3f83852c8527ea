package session

import (
	"errors"
	"fmt"
)

// ErrorKind classifies why tracing failed; cmd/tttrace maps it to an exit
// status.
type ErrorKind int

// Error kinds.
const (
	ErrInternal    ErrorKind = iota // anything not listed below
	ErrUsage                        // the Config is contradictory
	ErrPermission                   // not root, or BPF refused
	ErrNoProcess                    // a -p process does not exist
	ErrNoLibrary                    // the library was not found, or not loaded within Config.Wait
	ErrUnsupported                  // the library lacks what tttrace needs, or its layout is unknown
	ErrNotFound                     // the command to start was not found
)

var kindNames = [...]string{"internal", "usage", "permission", "no process", "no library", "unsupported", "not found"}

func (k ErrorKind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("ErrorKind(%d)", int(k))
}

// Error is a failure of Run with its kind.
type Error struct {
	Kind ErrorKind
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// KindOf returns the kind of err (ErrInternal when it is not an *Error).
func KindOf(err error) ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ErrInternal
}

func errorf(kind ErrorKind, format string, args ...any) error {
	return &Error{kind, fmt.Errorf(format, args...)}
}
