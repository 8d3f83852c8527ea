// Package sinks is where tttrace's outputs live: the Sink interface the
// runtime (package session) feeds, and the built-in outputs — the human
// report (its text is made here, in report.go), the live terminal view,
// NDJSON, and the notes the ledger's notices make on the log
// (noticelog.go). A new output is a type that implements Sink (embedding
// Base for the calls it ignores), in its own file or package, plus one
// registration line in cmd/tttrace/cli.
package sinks

import (
	"time"

	"github.com/tttrace/tttrace/alloc"

	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
)

// Sink receives what the runtime learns, in stream order, always from the
// same goroutine: a Sink needs no locking of its own unless it serves
// another goroutine (an HTTP endpoint, say).
type Sink interface {
	// Event is called for every event, after the ledger applied it. ev is
	// valid only during the call.
	Event(ev *events.Event)
	// ProcessEnded is called when a traced process has ended and all its
	// records were applied; one is the ledger's summary with only that
	// process in it, valid only during the call (its leak lists are read
	// from the ledger). more says other traced processes go on (otherwise
	// the Summary follows at once).
	ProcessEnded(one *devices.Summary, more bool)
	// Tick is called about every 100 ms while tracing (the runtime's
	// tick), also while records keep coming; v is valid only during the
	// call.
	Tick(v *View)
	// Summary is called once, when tracing ends, with the final state.
	Summary(s *devices.Summary) error
	// Close releases what the sink holds; it is called once, last, also
	// when tracing failed before a Summary.
	Close() error
}

// ChipObserver is implemented by sinks that follow every change of a
// chip's totals (counter tracks, gauges): the runtime registers them as the
// ledger's observer. See devices.Observer for the contract.
type ChipObserver interface {
	ChipTotals(pid uint32, chip int32, tsNs uint64, t *devices.Totals)
}

// AllocObserver is implemented by sinks that follow every change of a
// chip's allocator state for a buffer type (devices.AllocObserver): st is
// per bank, nil while the state is not known; banks is the type's bank
// count. st is valid only during the call.
type AllocObserver interface {
	AllocState(pid uint32, chip int32, tsNs uint64, typ events.BufferType, banks uint32, st *alloc.Statistics)
}

// NoticeSink is implemented by sinks that want the records the ledger
// derives from the events (devices.Notice: l1_clash, alloc_failed, the
// trace hazards, ...) the moment they happen: during the Apply of an
// event, so before that event's Event call. n is valid only during the
// call. It is the ledger's one notice interface: the runtime hands each
// notice to a NoticeLog on its log, then to every Sink implementing it.
type NoticeSink = devices.NoticeSink

// SiteSink is implemented by sinks that describe allocation sites in their
// stream: the runtime calls Site once per site, before the first Event
// that names it (events.Event.Site), if WantSites (symbolizing costs).
type SiteSink interface {
	WantSites() bool
	Site(pid uint32, s *devices.Site)
}

// View is the runtime's state at a tick.
type View struct {
	Now    time.Time
	Ledger *devices.Ledger // read only, during the call
	// Procs are the traced processes in the report that have not ended,
	// sorted by pid.
	Procs []Proc
	// Libraries is how many TT-Metal libraries are probed.
	Libraries int
	// Waiting is how many traced processes have not loaded TT-Metal yet.
	Waiting int
}

// Proc is a traced process that has not ended.
type Proc struct {
	Pid     uint32
	Command string
	// Placement: its host and ranks.
	Placement devices.Placement
}

// Base implements every Sink method as doing nothing; embed it and
// override what the output needs.
type Base struct{}

func (Base) Event(*events.Event)                 {}
func (Base) ProcessEnded(*devices.Summary, bool) {}
func (Base) Tick(*View)                          {}
func (Base) Summary(*devices.Summary) error      { return nil }
func (Base) Close() error                        { return nil }
