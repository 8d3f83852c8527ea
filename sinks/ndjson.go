package sinks

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"iter"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
)

// NDJSON writes the documented NDJSON stream (docs/ndjson.md): one line per
// event and per ledger notice (unless NoEvents), a process_summary line per process that ends
// while others are traced, and the summary line last.
type NDJSON struct {
	Base
	w        *bufio.Writer
	noEvents bool
	buf      []byte
	snap     OpenFunc // snapshots' own files (nil: in the stream)
	first    *runFirst
}

// NewNDJSON writes to w. noEvents leaves out the event lines.
func NewNDJSON(w io.Writer, noEvents bool) *NDJSON {
	first := &runFirst{w: &c1Escaper{w: w}}
	return &NDJSON{w: bufio.NewWriterSize(first, 1<<20), noEvents: noEvents, first: first}
}

// runFirst writes the run line, when there is one, before the stream's
// first bytes: a run that writes nothing else (it could not start) leaves
// its output untouched.
type runFirst struct {
	w       io.Writer
	pending []byte
	started bool
}

func (r *runFirst) Write(p []byte) (int, error) {
	if !r.started {
		r.started = true
		if len(r.pending) > 0 {
			if _, err := r.w.Write(r.pending); err != nil {
				return 0, err
			}
			r.pending = nil
		}
	}
	return r.w.Write(p)
}

// C1Escaped is w with the C1 control characters of the JSON texts written
// to it escaped (c1Escaper): for JSON written by other means than NDJSON.
func C1Escaped(w io.Writer) io.Writer { return &c1Escaper{w: w} }

// c1Escaper writes the C1 control characters (U+0080-U+009F) as \u escapes:
// encoding/json writes them raw, and a terminal that shows the stream
// takes some of them (CSI, OSC) as commands. In the UTF-8 of a JSON text
// they are the two-byte sequences C2 80-9F, found only inside strings,
// where \u0080 means the same character. A sequence split between two
// writes is carried over.
type c1Escaper struct {
	w       io.Writer
	pending bool // the last write ended with a C2 byte not yet written
	out     []byte
}

func (c *c1Escaper) Write(p []byte) (int, error) {
	if !c.pending && bytes.IndexByte(p, 0xc2) < 0 {
		// Nothing to escape (most writes: event lines are ASCII): p as
		// it is, in one write.
		if _, err := c.w.Write(p); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	const hex = "0123456789abcdef"
	out := c.out[:0]
	for rest := p; len(rest) > 0; {
		if c.pending {
			c.pending = false
			if b := rest[0]; b >= 0x80 && b <= 0x9f {
				out = append(out, '\\', 'u', '0', '0', hex[b>>4], hex[b&15])
				rest = rest[1:]
				continue
			}
			out = append(out, 0xc2) // not a C1 character: the byte after it is any other
		}
		i := bytes.IndexByte(rest, 0xc2)
		if i < 0 {
			out = append(out, rest...)
			break
		}
		out = append(out, rest[:i]...)
		c.pending = true
		rest = rest[i+1:]
	}
	c.out = out
	if _, err := c.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Run gives the stream its run line, written before its first line (not
// with NoEvents: a summary-only file is its summary line alone).
func (n *NDJSON) Run(r *Run) error {
	if n.noEvents || n.first.started || n.w.Buffered() > 0 {
		return nil
	}
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	n.first.pending = append(line, '\n')
	return nil
}

// Event writes the event's line.
func (n *NDJSON) Event(ev *events.Event) {
	if n.noEvents {
		return
	}
	n.buf = events.AppendJSON(n.buf[:0], ev)
	_, _ = n.w.Write(n.buf)
}

// Notice writes an l1_clash or l1_headroom line (not with NoEvents: the
// summary lists the clashes).
func (n *NDJSON) Notice(no *devices.Notice) {
	if n.noEvents {
		return
	}
	b, err := json.Marshal(no)
	if err != nil {
		return
	}
	_, _ = n.w.Write(append(b, '\n'))
}

// WantSites: site records go with the event lines.
func (n *NDJSON) WantSites() bool { return !n.noEvents }

// Site writes a site record: where the buffers of the alloc lines naming it
// (pid, site) were allocated.
func (n *NDJSON) Site(pid uint32, s *devices.Site) {
	b, err := json.Marshal(struct {
		Type string `json:"type"`
		Pid  uint32 `json:"pid"`
		*devices.Site
	}{"site", pid, s})
	if err != nil {
		return
	}
	_, _ = n.w.Write(append(b, '\n'))
}

// ProcessEnded writes a process_summary line when other processes go on
// (the summary line covers the last one).
func (n *NDJSON) ProcessEnded(one *devices.Summary, more bool) {
	if !more || len(one.Processes) != 1 {
		return
	}
	if err := n.process("process_summary", &one.Processes[0]); err != nil {
		return
	}
	_, _ = n.w.Write([]byte{'\n'})
	_ = n.w.Flush()
}

// Tick writes out the lines buffered since the last tick, so a reader of
// the stream (a pipe to jq, a file followed with tail -f) sees each record
// within a tick of its event, not when 1 MiB has gathered.
func (n *NDJSON) Tick(*View) {
	if n.w.Buffered() > 0 {
		_ = n.w.Flush()
	}
}

// Summary writes the summary line.
func (n *NDJSON) Summary(s *devices.Summary) error { return n.summary("", s) }

// summary writes s as a line of type typ ("": s.Type).
func (n *NDJSON) summary(typ string, s *devices.Summary) error {
	head := *s
	if typ != "" {
		head.Type = typ
	}
	head.Processes = nil
	b, err := json.Marshal(&head)
	if err != nil {
		return err
	}
	if s.Processes != nil {
		// Processes is the last field: the line so far ends "null}".
		b = bytes.TrimSuffix(b, []byte("null}"))
		_, _ = n.w.Write(append(b, '['))
		for i := range s.Processes {
			if i > 0 {
				_, _ = n.w.Write([]byte{','})
			}
			if err := n.process("", &s.Processes[i]); err != nil {
				return err
			}
		}
		b = []byte("]}")
	}
	if _, err := n.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return n.w.Flush()
}

// process writes p as encoding/json writes it (after a "type" field typ,
// unless ""), byte for byte, but encodes its leak lists one leak at a time
// straight into the writer: with a million buffers left allocated, the
// line is hundreds of MB, which encoding it whole would hold in memory
// (twice, as its buffer grows).
func (n *NDJSON) process(typ string, p *devices.ProcessSummary) error {
	q := *p
	q.Leaks, q.UnplacedLeaks = nil, nil
	placed, unplaced := p.AllLeaks(), p.AllUnplacedLeaks()
	if !p.Streamed() && p.Leaks == nil {
		placed = nil
	}
	if !p.Streamed() && p.UnplacedLeaks == nil {
		unplaced = nil
	}
	var b []byte
	var err error
	if typ != "" {
		b, err = json.Marshal(struct {
			Type string `json:"type"`
			*devices.ProcessSummary
		}{typ, &q})
	} else {
		b, err = json.Marshal(&q)
	}
	if err != nil {
		return err
	}
	// The keys are found by their quotes: a string value holds a quote
	// only escaped, and "unplaced_leaks" does not contain "\"leaks\"".
	for _, f := range []struct {
		key   string
		leaks iter.Seq[*devices.Leak]
	}{{`"leaks":null`, placed}, {`"unplaced_leaks":null`, unplaced}} {
		i := bytes.Index(b, []byte(f.key))
		if i < 0 {
			return errors.New("ndjson: " + f.key + " not found in a process summary")
		}
		_, _ = n.w.Write(b[:i+len(f.key)-len("null")])
		if err := n.leaks(f.leaks); err != nil {
			return err
		}
		b = b[i+len(f.key):]
	}
	_, err = n.w.Write(b)
	return err
}

// leaks writes a leak list as encoding/json would (nil: a nil slice).
func (n *NDJSON) leaks(ls iter.Seq[*devices.Leak]) error {
	if ls == nil {
		_, err := n.w.WriteString("null")
		return err
	}
	_ = n.w.WriteByte('[')
	first := true
	for lk := range ls {
		if !first {
			_ = n.w.WriteByte(',')
		}
		first = false
		b, err := json.Marshal(lk)
		if err != nil {
			return err
		}
		_, _ = n.w.Write(b)
	}
	return n.w.WriteByte(']')
}

// Close flushes what is buffered.
func (n *NDJSON) Close() error { return n.w.Flush() }
