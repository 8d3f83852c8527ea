package sinks

import (
	"fmt"
	"io"

	"github.com/tttrace/tttrace/devices"
)

// Snapshotter is implemented by sinks that can write the state as of now
// while tracing goes on (SIGUSR1, `tttrace snapshot`): s is the ledger's
// summary at that moment (processes still running are not exited), valid
// during the call; stamp is the snapshot's time, for names. It returns
// what it wrote to, for people.
type Snapshotter interface {
	Snapshot(s *devices.Summary, stamp string) (written []string, err error)
}

// OpenFunc opens the output of one snapshot, named after stamp, and
// returns its name; closing it puts it in place.
type OpenFunc func(stamp string) (w io.WriteCloser, name string, err error)

// writeSnapshot writes with write to the file open makes.
func writeSnapshot(open OpenFunc, stamp string, write func(io.Writer) error) ([]string, error) {
	w, name, err := open(stamp)
	if err != nil {
		return nil, err
	}
	err = write(w)
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return []string{name}, nil
}

// SnapshotTo makes the report's snapshots files of their own (open); by
// default they are written into the report's stream.
func (r *Report) SnapshotTo(open OpenFunc) { r.snap = open }

// Snapshot writes the report as of now.
func (r *Report) Snapshot(s *devices.Summary, stamp string) ([]string, error) {
	if r.snap != nil {
		return writeSnapshot(r.snap, stamp, func(w io.Writer) error { return writeReport(w, s) })
	}
	fmt.Fprintf(r.w, "tttrace: snapshot at %s (tracing goes on)\n", stamp)
	if err := writeReport(r.w, s); err != nil {
		return nil, err
	}
	return []string{"the report's output"}, r.w.Flush()
}

// SnapshotTo makes the NDJSON snapshots files of their own (open), each
// one summary line; by default a snapshot is a "snapshot" line in the
// stream, the summary's fields as of now.
func (n *NDJSON) SnapshotTo(open OpenFunc) { n.snap = open }

// Snapshot writes the summary as of now.
func (n *NDJSON) Snapshot(s *devices.Summary, stamp string) ([]string, error) {
	if n.snap != nil {
		return writeSnapshot(n.snap, stamp, func(w io.Writer) error {
			return NewNDJSON(w, true).Summary(s)
		})
	}
	if err := n.summary("snapshot", s); err != nil {
		return nil, err
	}
	return []string{"the NDJSON stream"}, nil
}
