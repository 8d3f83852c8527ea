// Package perfetto writes tttrace's timeline as a Perfetto trace: the
// protobuf TracePacket stream ui.perfetto.dev and trace_processor open
// (docs/perfetto.md).
//
// Per traced process there is a process track; under it a "device memory"
// track, under that one track per chip ("chip 3") and under each chip one
// counter track per memory type (DRAM, L1, L1_SMALL, TRACE, SYSTEM_MEMORY,
// CB: the CBs resident on the chip's busiest core) holding the exact bytes
// the ledger counts, then CB_REGISTERED and CB_RESIDENT_TOTAL (the CB
// bytes summed over the programs holding CBs, and over the cores), a
// sample at every change,
// then the allocator's counters of the chip ("chip 3 DRAM free", "chip 3
// DRAM largest free block", per buffer type in the same order).
// The intermediate tracks order their children explicitly (chips by id,
// types in the order above): trace_processor ignores the ordering of a
// process track's children and would sort them by name.
//
// Timestamps are CLOCK_MONOTONIC (the probes' bpf_ktime_get_ns): every
// packet says so (timestamp_clock_id), and a ClockSnapshot of MONOTONIC,
// BOOTTIME and REALTIME read together comes first (and again every
// snapshotEvery), so trace_processor puts the samples on its BOOTTIME
// timeline next to a system trace, suspend time included. Track uuids
// start from a random 64-bit base and the sequence id is random, so two
// files concatenated (cat a b) do not clash.
// Instants mark device and mesh closes (on the closing thread), process
// exits, lost records and the ledger's anomalies. TT-NN op calls are
// slices on their threads' tracks, short ones gathered (ops.go).
//
// Why protobuf and not Chrome's JSON: packets stream (a file cut short is
// still a trace up to its last whole packet), a counter sample is about 30
// bytes instead of about 100, values are int64 (JSON numbers are doubles)
// and timestamps nanosecond integers (JSON's are microsecond floats), and
// tracks are declared explicitly with their parent process and unit. The
// encoding is written by hand with protowire: the few messages used are
// numbered below from Perfetto's protos/perfetto/trace/.
package perfetto

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/tttrace/tttrace/alloc"
	"github.com/tttrace/tttrace/devices"
	"github.com/tttrace/tttrace/events"
	"github.com/tttrace/tttrace/sinks"
)

// Field numbers and enum values of the Perfetto protos used here.
const (
	fTracePacket = 1 // Trace.packet

	// TracePacket
	fPacketClockSnapshot   = 6
	fPacketClockID         = 58 // timestamp_clock_id
	fPacketTimestamp       = 8
	fPacketSequenceID      = 10 // trusted_packet_sequence_id
	fPacketTrackEvent      = 11
	fPacketTrackDescriptor = 60

	// TrackDescriptor
	fTrackUUID          = 1
	fTrackName          = 2
	fTrackProcess       = 3
	fTrackThread        = 4
	fTrackParent        = 5
	fTrackCounter       = 8
	fTrackChildOrdering = 11
	fTrackSiblingRank   = 12
	childOrderExplicit  = 3 // TrackDescriptor.ChildTracksOrdering.EXPLICIT

	// ClockSnapshot, ClockSnapshot.Clock, BuiltinClock
	fSnapshotClocks  = 1
	fSnapshotPrimary = 2
	fClockID         = 1
	fClockTimestamp  = 2
	clockRealtime    = 1
	clockMonotonic   = 3
	clockBoottime    = 6

	// ProcessDescriptor
	fProcessPid     = 1
	fProcessCmdline = 2
	fProcessName    = 6

	// ThreadDescriptor
	fThreadPid  = 1
	fThreadTid  = 2
	fThreadName = 5

	// CounterDescriptor
	fCounterUnit  = 3
	unitSizeBytes = 3 // CounterDescriptor.Unit.UNIT_SIZE_BYTES

	// TrackEvent
	fEventDebug        = 4
	fEventType         = 9
	fEventTrackUUID    = 11
	fEventName         = 23
	fEventCounterValue = 30
	typeInstant        = 3 // TrackEvent.Type.TYPE_INSTANT
	typeCounter        = 4 // TrackEvent.Type.TYPE_COUNTER

	// DebugAnnotation
	fAnnotationName    = 10
	fAnnotationUint    = 3
	fAnnotationInt     = 4
	fAnnotationString  = 6
	fAnnotationPointer = 7
)

// snapshotEvery is how often a clock snapshot is repeated (from Tick): the
// offset between MONOTONIC and BOOTTIME grows by every suspend.
const snapshotEvery = 10 * time.Second

// random64 is a random number from the kernel (never 0).
func random64() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on Linux; the clock still differs
		// between two runs.
		return uint64(time.Now().UnixNano()) | 1
	}
	return binary.LittleEndian.Uint64(b[:]) | 1
}

// Memory types: the counter tracks of a chip, in display order. CB is the
// busiest core's resident CBs (cb_bytes); CB_REGISTERED and
// CB_RESIDENT_TOTAL count the same CBs otherwise (cb_registered_bytes,
// cb_resident_total_bytes), beside it. L1_BUSIEST_CORE is L1 per core:
// what the chip's busiest core holds, its L1 buffers and resident CBs
// (l1_busiest_core.total_bytes).
var memTypes = [...]struct {
	counter devices.Counter
	name    string
}{
	{devices.CounterDRAM, "DRAM"},
	{devices.CounterL1, "L1"},
	{devices.CounterL1Small, "L1_SMALL"},
	{devices.CounterTrace, "TRACE"},
	{devices.CounterSystemMemory, "SYSTEM_MEMORY"},
	{devices.CounterCB, "CB"},
	{devices.CounterCBRegistered, "CB_REGISTERED"},
	{devices.CounterCBResidentTotal, "CB_RESIDENT_TOTAL"},
	{devices.CounterL1Core, "L1_BUSIEST_CORE"},
}

// allocRank is, by buffer type, the position of its memory type in
// memTypes: a chip's allocator tracks follow its memory types in the same
// order (DRAM, L1, L1_SMALL, TRACE, SYSTEM_MEMORY), not TT-Metal's
// numbering of buffer types.
var allocRank = func() (r [events.NumBufferTypes]int) {
	for t := range r {
		r[t] = -1
		for i := range memTypes {
			if memTypes[i].name == events.BufferType(t).String() {
				r[t] = i
			}
		}
		if r[t] < 0 {
			panic("perfetto: buffer type " + events.BufferType(t).String() + " is not a memory type")
		}
	}
	return r
}()

// NumTypes is how many memory-type counter tracks a chip can have.
const NumTypes = len(memTypes)

// TypeName is the name of memory type i (0 <= i < NumTypes), as in track
// names ("chip 0 DRAM").
func TypeName(i int) string { return memTypes[i].name }

// TypeCounter is the ledger counter of memory type i.
func TypeCounter(i int) devices.Counter { return memTypes[i].counter }

// Writer is the Perfetto sink. It implements sinks.Sink and
// sinks.ChipObserver; like every sink it is called from one goroutine.
type Writer struct {
	sinks.Base
	w      *bufio.Writer
	closer io.Closer // the file Create opened, nil otherwise

	// Comm names thread tid of process pid for its track ("" when unknown);
	// by default /proc/PID/task/TID/comm, read once per thread that gets
	// an instant.
	Comm func(pid, tid uint32) string

	procs    map[uint32][]*proc // by pid, incarnations in the order they lived
	lastPid  uint32
	last     *proc
	nextUUID uint64 // from a random base
	global   uint64 // the "tttrace" track for lost records (0: not yet)
	// seqID is every packet's trusted_packet_sequence_id: one writer, and
	// no incremental state (interning, delta timestamps) that would make a
	// packet depend on the ones before it. Random, as the uuids.
	seqID uint64
	// clock reads MONOTONIC, BOOTTIME and REALTIME (ns) for the clock
	// snapshots; lastClock is when the last one was written (MONOTONIC).
	clock     func() (mono, boot, real uint64)
	lastClock uint64

	// OpMin: a TT-NN op call shorter than this is gathered with its
	// neighbours into one slice (ops.go); 0: every call is a slice.
	OpMin time.Duration
	// OpsDropped counts op calls that are no slice: past maxOpLevels
	// open on a thread, or on threads past maxOpThreads.
	OpsDropped uint64
	opThreads  int // threads with op state

	ev, pk, td, sub, hdr []byte // scratch: track event, packet, descriptor, nested message, packet header
}

// proc is one incarnation of a traced process.
type proc struct {
	pid     uint32
	uuid    uint64
	mem     uint64 // its "device memory" track (0: not declared yet)
	named   bool   // its descriptor carried the command
	ended   bool   // its exit event was seen: a new event starts a new incarnation
	doneAn  bool   // its anomalies were written
	chips   map[int32]*chip
	last    *chip
	threads map[uint32]uint64 // tid -> thread track uuid
	lastTs  uint64
	ops     map[uint32]*opThread // tid -> its open op calls (ops.go)
}

// chip is one chip of a process: its counter tracks and their last values.
type chip struct {
	id     int32
	track  uint64           // its "chip N" track (0: not declared yet)
	uuid   [NumTypes]uint64 // 0: track not declared yet
	val    [NumTypes]uint64
	lastTs uint64
	// The allocator's tracks, by buffer type: free bytes and the largest
	// free block (banks x per bank), their uuids (0: not declared) and
	// last values.
	freeUUID, bigUUID [events.NumBufferTypes]uint64
	free, big         [events.NumBufferTypes]uint64
}

// Create writes a trace to the file path.
func Create(path string) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return NewCloser(f), nil
}

// NewCloser writes a trace to wc, which Close closes.
func NewCloser(wc io.WriteCloser) *Writer {
	w := New(wc)
	w.closer = wc
	return w
}

// New writes a trace to w.
func New(w io.Writer) *Writer {
	return &Writer{
		w:        bufio.NewWriterSize(w, 1<<20),
		Comm:     procComm,
		procs:    make(map[uint32][]*proc),
		nextUUID: random64(),
		seqID:    1 + random64()%(1<<31-1),
		clock:    readClocks,
		OpMin:    DefaultOpMin,
	}
}

// readClocks reads the three clocks as close together as it can.
func readClocks() (mono, boot, real uint64) {
	var m, b, r unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &m)
	_ = unix.ClockGettime(unix.CLOCK_BOOTTIME, &b)
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &r)
	return uint64(m.Nano()), uint64(b.Nano()), uint64(r.Nano())
}

func procComm(pid, tid uint32) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/comm", pid, tid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (w *Writer) uuid() uint64 {
	w.nextUUID++
	if w.nextUUID == 0 { // 0 is "no track"
		w.nextUUID++
	}
	return w.nextUUID
}

// proc returns the live incarnation of pid, declaring its track first.
// After its exit event, a record of the same pid is a new process the
// kernel gave that pid (the runtime drains a process's records before its
// exit): a new incarnation, with its own tracks.
func (w *Writer) proc(pid uint32, ts uint64) *proc {
	if p := w.last; p != nil && w.lastPid == pid && !p.ended {
		return p
	}
	ps := w.procs[pid]
	if n := len(ps); n > 0 && !ps[n-1].ended {
		w.last, w.lastPid = ps[n-1], pid
		return ps[n-1]
	}
	p := &proc{pid: pid, uuid: w.uuid(), chips: make(map[int32]*chip), threads: make(map[uint32]uint64), lastTs: ts}
	w.procs[pid] = append(ps, p)
	w.last, w.lastPid = p, pid
	w.describeProcess(p, ts, "")
	return p
}

// ChipTotals writes a sample on each counter track of the chip whose value
// changed. It allocates nothing once the chip's tracks are declared.
func (w *Writer) ChipTotals(pid uint32, chipID int32, ts uint64, t *devices.Totals) {
	p := w.proc(pid, ts)
	c := p.chipOf(chipID)
	// Ring order is the ledger's order; CPUs' clocks may disagree by a few
	// ns. A chip's samples move forward just enough to keep that order.
	if ts <= c.lastTs {
		ts = c.lastTs + 1
	}
	wrote := false
	for i := range memTypes {
		v := t[memTypes[i].counter]
		if v == c.val[i] {
			continue
		}
		if c.uuid[i] == 0 {
			c.uuid[i] = w.uuid()
			w.describeCounter(p, c, i, ts)
		}
		c.val[i] = v
		w.counter(c.uuid[i], ts, v)
		wrote = true
	}
	if wrote {
		c.lastTs = ts
		p.lastTs = max(p.lastTs, ts)
	}
}

// chipOf returns chip id of p, creating it.
func (p *proc) chipOf(id int32) *chip {
	c := p.last
	if c == nil || c.id != id {
		c = p.chips[id]
		if c == nil {
			c = &chip{id: id}
			p.chips[id] = c
		}
		p.last = c
	}
	return c
}

// AllocState writes the allocator's free bytes and largest free block of
// a chip and type (banks x the per-bank numbers) when they changed; while
// the state is not known the tracks keep their last sample.
func (w *Writer) AllocState(pid uint32, chipID int32, ts uint64, typ events.BufferType, banks uint32, st *alloc.Statistics) {
	if st == nil || !typ.Valid() {
		return
	}
	p := w.proc(pid, ts)
	c := p.chipOf(chipID)
	if ts <= c.lastTs {
		ts = c.lastTs + 1
	}
	free, big := devices.SatMul(uint64(banks), st.TotalFree), devices.SatMul(uint64(banks), st.LargestFreeBlock)
	if c.freeUUID[typ] == 0 {
		c.freeUUID[typ], c.bigUUID[typ] = w.uuid(), w.uuid()
		// After the memory types, free then largest free block, by type
		// in the memory types' order.
		rank := NumTypes + 2*allocRank[typ]
		w.describeAlloc(p, c, c.freeUUID[typ], fmt.Sprintf("chip %d %s free", c.id, typ), rank, ts)
		w.describeAlloc(p, c, c.bigUUID[typ], fmt.Sprintf("chip %d %s largest free block", c.id, typ), rank+1, ts)
	} else if free == c.free[typ] && big == c.big[typ] {
		return
	}
	c.free[typ], c.big[typ] = free, big
	w.counter(c.freeUUID[typ], ts, free)
	w.counter(c.bigUUID[typ], ts, big)
	c.lastTs = ts
	p.lastTs = max(p.lastTs, ts)
}

// describeAlloc declares an allocator counter track of chip c.
func (w *Writer) describeAlloc(p *proc, c *chip, uuid uint64, name string, rank int, ts uint64) {
	parent := w.chipTrack(p, c, ts)
	w.sub = w.sub[:0]
	w.sub = appendUint(w.sub, fCounterUnit, unitSizeBytes)
	w.td = w.td[:0]
	w.td = appendUint(w.td, fTrackUUID, uuid)
	w.td = appendUint(w.td, fTrackParent, parent)
	w.td = appendString(w.td, fTrackName, name)
	w.td = appendBytes(w.td, fTrackCounter, w.sub)
	w.td = appendRank(w.td, int64(rank))
	w.descriptor(ts)
}

// Notice writes an instant per failed allocation, on the thread that
// asked, with its numbers as arguments.
func (w *Writer) Notice(n *devices.Notice) {
	if n.Trace != nil {
		w.traceNote(n.Trace)
		return
	}
	f := n.AllocFailed
	if n.Type != devices.NoticeAllocFailed || f == nil {
		return
	}
	p := w.proc(f.Pid, f.TsNs)
	cause := f.Cause
	if cause == "" {
		cause = "cause unknown"
	}
	name := fmt.Sprintf("alloc_failed %s (%s)", f.BufferType, cause)
	args := []ann{
		{name: "buffer_type", kind: annString, s: f.BufferType},
		{name: "cause", kind: annString, s: f.Cause},
		{name: "size", kind: annUint, u: f.Size},
		{name: "page_size", kind: annUint, u: f.PageSize},
		{name: "banks", kind: annUint, u: uint64(f.Banks)},
		{name: "size_per_bank", kind: annUint, u: f.SizePerBank},
		{name: "bank_size", kind: annUint, u: f.BankSize},
		{name: "seq", kind: annUint, u: f.Seq},
		{name: "holders_count", kind: annUint, u: uint64(f.HoldersCount)},
		{name: "holders_bytes", kind: annUint, u: f.HoldersBytes},
	}
	switch {
	case f.Device != nil:
		name = fmt.Sprintf("alloc_failed chip %d %s (%s)", *f.Device, f.BufferType, cause)
		args = append(args, ann{name: "chip", kind: annInt, i: int64(*f.Device)})
	case f.MeshDevice != "":
		// A MeshDevice's own allocator refused.
		name = fmt.Sprintf("alloc_failed mesh %s %s (%s)", f.MeshDevice, f.BufferType, cause)
		args = append(args, ann{name: "mesh_device", kind: annString, s: f.MeshDevice})
	}
	if f.TotalAllocated != nil {
		args = append(args, ann{name: "total_allocated_bytes", kind: annUint, u: *f.TotalAllocated},
			ann{name: "total_free_bytes", kind: annUint, u: *f.TotalFree},
			ann{name: "largest_free_block_bytes", kind: annUint, u: *f.LargestFree})
	}
	if f.Why != "" {
		args = append(args, ann{name: "why", kind: annString, s: f.Why})
	}
	if f.Site != 0 {
		args = append(args, ann{name: "site", kind: annUint, u: uint64(f.Site)})
	}
	w.instant(w.thread(p, f.Tid, f.TsNs), f.TsNs, name, args...)
}

// traceNote writes an instant per trace record (trace_hazard,
// trace_replay_invalid, trace_region_hazard, trace_capture_alloc), on the
// thread of the replay or allocation that made it, with its fields as
// arguments (docs/ndjson.md has their meaning).
func (w *Writer) traceNote(t *devices.TraceNote) {
	p := w.proc(t.Pid, t.TsNs)
	name := t.Type.String()
	args := []ann{{name: "cq", kind: annUint, u: uint64(t.CQ)}, {name: "seq", kind: annUint, u: t.Seq}}
	if t.Device >= 0 {
		name += fmt.Sprintf(" chip %d", t.Device)
		args = append(args, ann{name: "chip", kind: annInt, i: int64(t.Device)})
	}
	if t.Trace != nil {
		name += fmt.Sprintf(" trace %d", *t.Trace)
		args = append(args, ann{name: "trace", kind: annUint, u: uint64(*t.Trace)})
	}
	if t.Replay != 0 {
		args = append(args, ann{name: "replay", kind: annUint, u: t.Replay})
	}
	if t.Reason != "" {
		name += " (" + t.Reason + ")"
		args = append(args, ann{name: "reason", kind: annString, s: t.Reason})
	}
	if t.MeshDevice != "" {
		args = append(args, ann{name: "mesh_device", kind: annString, s: t.MeshDevice})
	}
	for _, b := range []struct {
		prefix string
		b      *devices.TraceBuffer
	}{{"buffer_", t.Buffer}, {"captured_", t.Captured}} {
		if b.b == nil {
			continue
		}
		args = append(args,
			ann{name: b.prefix + "type", kind: annString, s: b.b.BufferType},
			ann{name: b.prefix + "address", kind: annUint, u: b.b.Address},
			ann{name: b.prefix + "size", kind: annUint, u: b.b.Size},
			ann{name: b.prefix + "pointer", kind: annString, s: b.b.Buffer})
		if b.b.Site != 0 {
			args = append(args, ann{name: b.prefix + "site", kind: annUint, u: uint64(b.b.Site)})
		}
	}
	if t.OtherTrace != nil {
		args = append(args, ann{name: "other_trace", kind: annUint, u: uint64(*t.OtherTrace)},
			ann{name: "high_water_mark", kind: annUint, u: t.HighWaterMark})
	}
	w.instant(w.thread(p, t.Tid, t.TsNs), t.TsNs, name, args...)
}

// Event writes the TT-NN op slices (ops.go) and the instants: device and
// mesh closes, exits, lost records.
func (w *Writer) Event(ev *events.Event) {
	if looksAtOps(ev.Kind) {
		w.opRecord(ev)
	}
	switch ev.Kind {
	case events.KindDeviceClose:
		p := w.proc(ev.Pid, ev.TsNs)
		name := "device_close"
		if ev.DeviceKind == events.DeviceChip {
			name = fmt.Sprintf("device_close chip %d", ev.Chip)
		}
		w.instant(w.thread(p, ev.Tid, ev.TsNs), ev.TsNs, name,
			ann{name: "chip", kind: annInt, i: int64(ev.Chip)},
			ann{name: "device", kind: annPointer, u: ev.Device},
			ann{name: "seq", kind: annUint, u: ev.Seq})
	case events.KindMeshClose:
		p := w.proc(ev.Pid, ev.TsNs)
		w.instant(w.thread(p, ev.Tid, ev.TsNs), ev.TsNs, "mesh_close",
			ann{name: "mesh_device", kind: annPointer, u: ev.Device},
			ann{name: "seq", kind: annUint, u: ev.Seq})
	case events.KindExit:
		p := w.proc(ev.Pid, ev.TsNs)
		name := fmt.Sprintf("exit %d", ev.ExitCode)
		if ev.ExitSignal != 0 {
			name = fmt.Sprintf("killed by signal %d", ev.ExitSignal)
		}
		w.opsEnd(p, ev.TsNs)
		w.instant(p.uuid, ev.TsNs, name,
			ann{name: "exit_code", kind: annInt, i: int64(ev.ExitCode)},
			ann{name: "exit_signal", kind: annInt, i: int64(ev.ExitSignal)})
		p.ended = true
	case events.KindLost:
		w.lost(ev.TsNs, ev.LostBefore)
		return
	}
	if ev.LostBefore > 0 {
		w.lost(ev.TsNs, ev.LostBefore)
	}
}

func (w *Writer) lost(ts, n uint64) {
	if w.global == 0 {
		w.global = w.uuid()
		w.td = w.td[:0]
		w.td = appendUint(w.td, fTrackUUID, w.global)
		w.td = appendString(w.td, fTrackName, "tttrace")
		w.descriptor(ts)
	}
	w.instant(w.global, ts, fmt.Sprintf("lost %d records: the counters are incomplete", n),
		ann{name: "lost", kind: annUint, u: n})
}

// Tick names the processes that are not named yet, and repeats the clock
// snapshot every snapshotEvery.
func (w *Writer) Tick(v *sinks.View) {
	if mono, _, _ := w.clock(); w.lastClock != 0 && mono-w.lastClock >= uint64(snapshotEvery) {
		w.clockSnapshot()
	}
	for _, vp := range v.Procs {
		if ps := w.procs[vp.Pid]; len(ps) > 0 {
			if p := ps[len(ps)-1]; !p.named && !p.ended && vp.Command != "" {
				w.describeProcess(p, p.lastTs, vp.Command)
			}
		}
	}
}

// ProcessEnded names the process and writes its anomalies.
func (w *Writer) ProcessEnded(one *devices.Summary, _ bool) {
	if len(one.Processes) != 1 {
		return
	}
	ps := w.procs[one.Processes[0].Pid]
	if len(ps) == 0 {
		return
	}
	w.opsEnd(ps[len(ps)-1], 0) // ended without an exit record: at each thread's last
	w.finishProcess(ps[len(ps)-1], &one.Processes[0])
	_ = w.w.Flush()
}

// Summary names every process, writes the anomalies not written yet and
// leaves the op calls still running open.
func (w *Writer) Summary(s *devices.Summary) error {
	pids := make([]uint32, 0, len(w.procs))
	for pid := range w.procs {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	for _, pid := range pids {
		for _, p := range w.procs[pid] {
			w.opsOpen(p)
		}
	}
	seen := map[uint32]int{}
	for i := range s.Processes {
		sp := &s.Processes[i]
		n := seen[sp.Pid]
		seen[sp.Pid]++
		ps := w.procs[sp.Pid]
		var p *proc
		switch {
		case n < len(ps):
			p = ps[n]
		case len(sp.Anomalies) == 0:
			continue // never seen, nothing to show
		default:
			p = &proc{pid: sp.Pid, uuid: w.uuid(), chips: map[int32]*chip{}, threads: map[uint32]uint64{}, lastTs: sp.Anomalies[0].TsNs}
			w.procs[sp.Pid] = append(ps, p)
			w.describeProcess(p, sp.Anomalies[0].TsNs, "")
		}
		w.finishProcess(p, sp)
	}
	return w.w.Flush()
}

// finishProcess names p after sp and writes its anomalies, once.
func (w *Writer) finishProcess(p *proc, sp *devices.ProcessSummary) {
	if !p.named && sp.Command != "" {
		w.describeProcess(p, p.lastTs, sp.Command)
	}
	if p.doneAn {
		return
	}
	p.doneAn = true
	var total uint64
	for _, n := range sp.AnomalyCounts {
		total += n
	}
	for i := range sp.Anomalies {
		a := &sp.Anomalies[i]
		track := p.uuid
		if a.Tid != 0 {
			track = w.thread(p, a.Tid, a.TsNs)
		}
		w.instant(track, a.TsNs, "anomaly: "+a.Kind,
			ann{name: "event", kind: annString, s: a.Event},
			ann{name: "seq", kind: annUint, u: a.Seq},
			ann{name: "detail", kind: annString, s: a.Detail})
	}
	if n := uint64(len(sp.Anomalies)); total > n && n > 0 {
		last := &sp.Anomalies[n-1]
		w.instant(p.uuid, last.TsNs, fmt.Sprintf("%d more anomalies (counted, not detailed: see the report)", total-n),
			ann{name: "anomalies", kind: annUint, u: total})
	}
}

// Close flushes what is buffered and closes the file.
func (w *Writer) Close() error {
	err := w.w.Flush()
	if w.closer != nil {
		if cerr := w.closer.Close(); err == nil {
			err = cerr
		}
		w.closer = nil
	}
	return err
}

// thread returns the track of thread tid of p, declaring it first.
func (w *Writer) thread(p *proc, tid uint32, ts uint64) uint64 {
	if tid == 0 {
		return p.uuid
	}
	if u, ok := p.threads[tid]; ok {
		return u
	}
	u := w.uuid()
	p.threads[tid] = u
	var name string
	if w.Comm != nil {
		name = w.Comm(p.pid, tid)
	}
	w.sub = w.sub[:0]
	w.sub = appendUint(w.sub, fThreadPid, uint64(p.pid))
	w.sub = appendUint(w.sub, fThreadTid, uint64(tid))
	if name != "" {
		w.sub = appendString(w.sub, fThreadName, name)
	}
	w.td = w.td[:0]
	w.td = appendUint(w.td, fTrackUUID, u)
	w.td = appendUint(w.td, fTrackParent, p.uuid)
	w.td = appendBytes(w.td, fTrackThread, w.sub)
	w.descriptor(ts)
	return u
}

// describeProcess declares (or, with a command, names) p's track.
func (w *Writer) describeProcess(p *proc, ts uint64, command string) {
	w.sub = w.sub[:0]
	w.sub = appendUint(w.sub, fProcessPid, uint64(p.pid))
	if command != "" {
		// cmdline is argv, one string each.
		for _, arg := range strings.Fields(command) {
			w.sub = appendString(w.sub, fProcessCmdline, arg)
		}
		w.sub = appendString(w.sub, fProcessName, processName(command))
		p.named = true
	}
	w.td = w.td[:0]
	w.td = appendUint(w.td, fTrackUUID, p.uuid)
	w.td = appendBytes(w.td, fTrackProcess, w.sub)
	w.descriptor(ts)
}

// chipTrack declares, the first time, p's "device memory" track and c's
// "chip N" track under it, and returns the latter.
func (w *Writer) chipTrack(p *proc, c *chip, ts uint64) uint64 {
	if c.track != 0 {
		return c.track
	}
	if p.mem == 0 {
		p.mem = w.uuid()
		w.td = w.td[:0]
		w.td = appendUint(w.td, fTrackUUID, p.mem)
		w.td = appendUint(w.td, fTrackParent, p.uuid)
		w.td = appendString(w.td, fTrackName, "device memory")
		w.td = appendUint(w.td, fTrackChildOrdering, childOrderExplicit)
		w.descriptor(ts)
	}
	c.track = w.uuid()
	w.td = w.td[:0]
	w.td = appendUint(w.td, fTrackUUID, c.track)
	w.td = appendUint(w.td, fTrackParent, p.mem)
	w.td = appendString(w.td, fTrackName, fmt.Sprintf("chip %d", c.id))
	w.td = appendUint(w.td, fTrackChildOrdering, childOrderExplicit)
	w.td = appendRank(w.td, int64(c.id)) // chips by id
	w.descriptor(ts)
	return c.track
}

// appendRank appends sibling_order_rank (an int32) v, clamped.
func appendRank(b []byte, v int64) []byte {
	v = max(min(v, 1<<31-1), -1<<31)
	b = protowire.AppendTag(b, fTrackSiblingRank, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(v))
}

// processName is the program of a command line: its first word's base name.
func processName(command string) string {
	first, _, _ := strings.Cut(command, " ")
	if i := strings.LastIndexByte(first, '/'); i >= 0 && i < len(first)-1 {
		first = first[i+1:]
	}
	return first
}

// describeCounter declares counter track i of chip c.
func (w *Writer) describeCounter(p *proc, c *chip, i int, ts uint64) {
	parent := w.chipTrack(p, c, ts)
	w.sub = w.sub[:0]
	w.sub = appendUint(w.sub, fCounterUnit, unitSizeBytes)
	w.td = w.td[:0]
	w.td = appendUint(w.td, fTrackUUID, c.uuid[i])
	w.td = appendUint(w.td, fTrackParent, parent)
	w.td = appendString(w.td, fTrackName, fmt.Sprintf("chip %d %s", c.id, memTypes[i].name))
	w.td = appendBytes(w.td, fTrackCounter, w.sub)
	w.td = appendRank(w.td, int64(i)) // types in display order
	w.descriptor(ts)
}

// descriptor writes the track descriptor in w.td as a packet at ts.
func (w *Writer) descriptor(ts uint64) {
	w.pk = w.pk[:0]
	w.pk = appendUint(w.pk, fPacketTimestamp, ts)
	w.pk = appendUint(w.pk, fPacketClockID, clockMonotonic)
	w.pk = appendUint(w.pk, fPacketSequenceID, w.seqID)
	w.pk = appendBytes(w.pk, fPacketTrackDescriptor, w.td)
	w.packet()
}

// counter writes one counter sample.
func (w *Writer) counter(track, ts, v uint64) {
	w.ev = w.ev[:0]
	w.ev = appendUint(w.ev, fEventType, typeCounter)
	w.ev = appendUint(w.ev, fEventTrackUUID, track)
	w.ev = appendUint(w.ev, fEventCounterValue, v) // int64 on the wire; bytes stay far below 2^63
	w.event(ts)
}

type annKind uint8

const (
	annUint annKind = iota
	annInt
	annPointer
	annString
)

// ann is one debug annotation (an argument of an instant in the UI).
type ann struct {
	name string
	kind annKind
	u    uint64
	i    int64
	s    string
}

// instant writes an instant named name on track, with its arguments.
func (w *Writer) instant(track, ts uint64, name string, args ...ann) {
	w.trackEvent(typeInstant, track, ts, name, args)
}

// trackEvent writes a track event of type typ named name (none: "") on
// track, with its arguments.
func (w *Writer) trackEvent(typ, track, ts uint64, name string, args []ann) {
	w.ev = w.ev[:0]
	w.ev = appendUint(w.ev, fEventType, typ)
	w.ev = appendUint(w.ev, fEventTrackUUID, track)
	if name != "" {
		w.ev = appendString(w.ev, fEventName, name)
	}
	for _, a := range args {
		w.sub = w.sub[:0]
		w.sub = appendString(w.sub, fAnnotationName, a.name)
		switch a.kind {
		case annUint:
			w.sub = appendUint(w.sub, fAnnotationUint, a.u)
		case annInt:
			w.sub = appendUint(w.sub, fAnnotationInt, uint64(a.i))
		case annPointer:
			w.sub = appendUint(w.sub, fAnnotationPointer, a.u)
		case annString:
			w.sub = appendString(w.sub, fAnnotationString, a.s)
		}
		w.ev = appendBytes(w.ev, fEventDebug, w.sub)
	}
	w.event(ts)
}

// event writes the track event in w.ev as a packet at ts.
func (w *Writer) event(ts uint64) {
	w.pk = w.pk[:0]
	w.pk = appendUint(w.pk, fPacketTimestamp, ts)
	w.pk = appendUint(w.pk, fPacketClockID, clockMonotonic)
	w.pk = appendUint(w.pk, fPacketSequenceID, w.seqID)
	w.pk = appendBytes(w.pk, fPacketTrackEvent, w.ev)
	w.packet()
}

// packet appends the packet in w.pk to the trace, after the first clock
// snapshot. Write errors stick in the bufio.Writer and come out of Summary
// or Close.
func (w *Writer) packet() {
	if w.lastClock == 0 {
		pk := w.pk
		w.pk = nil
		w.clockSnapshot()
		w.pk = pk
	}
	w.writePacket()
}

// clockSnapshot writes a ClockSnapshot packet: MONOTONIC (the stamps'
// clock), BOOTTIME (the primary trace clock) and REALTIME, read now.
func (w *Writer) clockSnapshot() {
	mono, boot, real := w.clock()
	w.lastClock = max(mono, 1)
	w.sub = w.sub[:0]
	for _, c := range [...]struct{ id, ts uint64 }{{clockMonotonic, mono}, {clockBoottime, boot}, {clockRealtime, real}} {
		var cl []byte
		cl = appendUint(cl, fClockID, c.id)
		cl = appendUint(cl, fClockTimestamp, c.ts)
		w.sub = appendBytes(w.sub, fSnapshotClocks, cl)
	}
	w.sub = appendUint(w.sub, fSnapshotPrimary, clockBoottime)
	w.pk = w.pk[:0]
	w.pk = appendUint(w.pk, fPacketTimestamp, boot)
	w.pk = appendUint(w.pk, fPacketSequenceID, w.seqID)
	w.pk = appendBytes(w.pk, fPacketClockSnapshot, w.sub)
	w.writePacket()
}

func (w *Writer) writePacket() {
	w.hdr = protowire.AppendTag(w.hdr[:0], fTracePacket, protowire.BytesType)
	w.hdr = protowire.AppendVarint(w.hdr, uint64(len(w.pk)))
	_, _ = w.w.Write(w.hdr)
	_, _ = w.w.Write(w.pk)
}

func appendUint(b []byte, field protowire.Number, v uint64) []byte {
	b = protowire.AppendTag(b, field, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendString(b []byte, field protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, field protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}
