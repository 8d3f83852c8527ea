package sinks

import (
	"fmt"
	"io"

	"github.com/tttrace/tttrace/devices"
)

// NoticeLog tells people of the ledger's notices as they happen, on the
// log of tttrace's notes (stderr): a clash next to the exception TT-Metal
// is about to throw for it, a failed allocation next to TT-Metal's own
// message, a trace hazard when the replay is seen, before it runs. It
// writes the first noticeLogMax of each family, then one line saying more
// are in the report (which, with NDJSON, has them all); l1_headroom and
// trace_capture_alloc are not told. Its text is what people read: a
// notice kind's line is written here and nowhere else.
type NoticeLog struct {
	w                      io.Writer
	clashes, ooms, hazards int // notes of each family so far
	divergences            int
}

// noticeLogMax is how many notes of each family NoticeLog writes.
const noticeLogMax = 10

// NewNoticeLog writes to w.
func NewNoticeLog(w io.Writer) *NoticeLog { return &NoticeLog{w: w} }

// Notice writes n's note, if it is one people are told of.
func (l *NoticeLog) Notice(n *devices.Notice) {
	switch {
	case n.Type == devices.NoticeAllocFailed:
		if n.AllocFailed != nil {
			l.oom(n.AllocFailed)
		}
	case n.Trace != nil:
		l.trace(n.Trace)
	case n.Type == devices.NoticeL1Clash:
		l.clash(n)
	case n.PerCore != nil:
		l.divergence(n.PerCore)
	}
}

// divergence: a per-core buffer whose cores got different addresses;
// whoever reads its Buffer::address() on those cores reads the wrong place.
func (l *NoticeLog) divergence(d *devices.PerCoreDivergence) {
	if !l.more(&l.divergences, "per-core buffers whose cores got different addresses") {
		return
	}
	fmt.Fprintf(l.w, "tttrace: pid %d chip %d: per-core buffer %s (%d bytes, seq %d) is at %#x on its first core but elsewhere on %d of its %d cores (%d addresses): Buffer::address() is wrong there\n",
		d.Pid, d.Device, d.Buffer, d.Size, d.Seq, d.Address, d.Differing, d.CoresCount, d.Distinct)
}

// more counts a note of a family and says whether to write it; past the
// limit it writes, once, that more are in the report.
func (l *NoticeLog) more(count *int, what string) bool {
	*count++
	if *count == noticeLogMax+1 {
		fmt.Fprintf(l.w, "tttrace: more %s: see the report\n", what)
	}
	return *count <= noticeLogMax
}

func (l *NoticeLog) clash(n *devices.Notice) {
	if !l.more(&l.clashes, "L1 clashes") {
		return
	}
	if n.Clash == devices.ClashPossible {
		fmt.Fprintf(l.w, "tttrace: pid %d chip %d: circular buffers of program %s end at %d, above per-core buffer %s's block at %d on bank %d: a clash if that bank's core is one of the CBs' (tttrace does not know which core a bank is)\n",
			n.Pid, n.Chip, n.Program, n.CBRegionEnd, n.Lowest.Buffer, n.LowestL1Address, bankOf(n.Lowest.Bank))
		return
	}
	fmt.Fprintf(l.w, "tttrace: pid %d chip %d: circular buffers of program %s end at %d, above the L1 buffer at %d (%s, %d byte(s), allocated by tid %d, seq %d): %d L1 buffer(s) in the way\n",
		n.Pid, n.Chip, n.Program, n.CBRegionEnd, n.LowestL1Address, n.Lowest.Buffer, n.Lowest.Size, n.Lowest.Tid, n.Lowest.Seq, n.L1BuffersCount)
}

func bankOf(b *uint32) uint32 {
	if b == nil {
		return 0
	}
	return *b
}

func (l *NoticeLog) trace(n *devices.TraceNote) {
	if n.Type == devices.NoticeTraceCaptureAlloc || !l.more(&l.hazards, "trace hazards") {
		return
	}
	id := "?"
	if n.Trace != nil {
		id = fmt.Sprint(*n.Trace)
	}
	switch n.Type {
	case devices.NoticeTraceHazard:
		fmt.Fprintf(l.w, "tttrace: pid %d chip %d: replay %d of trace %s overwrites live %s buffer %s at %#x (%d bytes, seq %d): it was allocated after the capture, over captured buffer %s at %#x\n",
			n.Pid, n.Device, n.Replay, id, n.Buffer.BufferType, n.Buffer.Buffer, n.Buffer.Address, n.Buffer.Size, n.Buffer.Seq, n.Captured.Buffer, n.Captured.Address)
	case devices.NoticeTraceReplayInvalid:
		fmt.Fprintf(l.w, "tttrace: pid %d: trace %s replayed (%s)\n", n.Pid, id, n.Reason)
	case devices.NoticeTraceRegionHazard:
		fmt.Fprintf(l.w, "tttrace: pid %d chip %d: the buffer of trace %s at %#x is under another live trace's high-water mark %#x\n",
			n.Pid, n.Device, id, n.Buffer.Address, n.HighWaterMark)
	}
}

func (l *NoticeLog) oom(f *devices.AllocFailure) {
	if !l.more(&l.ooms, "failed allocations") {
		return
	}
	where := "a chip tttrace does not know"
	if f.Device != nil {
		where = fmt.Sprintf("chip %d", *f.Device)
	}
	cause := f.Cause
	if cause == "" {
		cause = "cause unknown: " + f.Why
	}
	fmt.Fprintf(l.w, "tttrace: pid %d tid %d: %s allocation of %d bytes on %s failed (%s); %d buffer(s) of %d bytes held it: see the report\n",
		f.Pid, f.Tid, f.BufferType, f.Size, where, cause, f.HoldersCount, f.HoldersBytes)
}
