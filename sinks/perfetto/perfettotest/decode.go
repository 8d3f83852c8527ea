// Package perfettotest reads back a Perfetto trace for tests: an
// independent decoder of the protobuf messages tttrace writes (field numbers
// from Perfetto's protos, not from package perfetto), which also checks the
// rules trace_processor relies on, and reads counter tracks the way it does
// (samples ordered by timestamp).
package perfettotest

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

// Trace is a decoded trace.
type Trace struct {
	Packets   int
	Tracks    map[uint64]*Track
	Processes []*Track // process tracks, in the order they were first declared
	Instants  []Instant
	// SliceEvents are the slice begins and ends, in file order (Slices
	// nests them).
	SliceEvents []SliceEvent
}

// Track is one declared track and what was written on it.
type Track struct {
	UUID, Parent uint64
	Name         string
	// Process track
	IsProcess   bool
	Pid         int32
	ProcessName string
	Cmdline     []string
	// Thread track
	IsThread   bool
	Tid        int32
	ThreadName string
	// Counter track
	IsCounter bool
	Unit      uint64
	Samples   []Sample
}

// Sample is one counter value.
type Sample struct {
	Ts    uint64
	Value int64
}

// Instant is one instant event.
type Instant struct {
	Ts    uint64
	Track uint64
	Name  string
	Args  map[string]string // values printed with %v
}

// ReadFile decodes the trace in path.
func ReadFile(path string) (*Trace, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Decode(b)
}

// field calls fn for each field of the message b.
func fields(b []byte, fn func(num protowire.Number, typ protowire.Type, v uint64, bs []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v uint64
		var bs []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			bs, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(num, typ, v, bs); err != nil {
			return err
		}
	}
	return nil
}

// Decode decodes a trace: a Trace message, repeated TracePacket packet = 1.
// It fails on what trace_processor would drop or misread: a packet without
// a sequence id, an event on an undeclared track, a counter value on a
// track that is not a counter, an instant on a counter track.
func Decode(b []byte) (*Trace, error) {
	t := &Trace{Tracks: map[uint64]*Track{}}
	err := fields(b, func(num protowire.Number, typ protowire.Type, _ uint64, pkt []byte) error {
		if num != 1 || typ != protowire.BytesType {
			return fmt.Errorf("top level field %d: not a packet", num)
		}
		t.Packets++
		if err := t.packet(pkt); err != nil {
			return fmt.Errorf("packet %d: %w", t.Packets, err)
		}
		return nil
	})
	return t, err
}

func (t *Trace) packet(b []byte) error {
	var ts uint64
	var hasTs, hasSeq bool
	var desc, ev []byte
	err := fields(b, func(num protowire.Number, _ protowire.Type, v uint64, bs []byte) error {
		switch num {
		case 8:
			ts, hasTs = v, true
		case 10:
			hasSeq = v != 0
		case 60:
			desc = bs
		case 11:
			ev = bs
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !hasSeq {
		return errors.New("no trusted_packet_sequence_id")
	}
	if desc != nil {
		return t.descriptor(desc)
	}
	if ev != nil {
		if !hasTs {
			return errors.New("track event without timestamp")
		}
		return t.event(ts, ev)
	}
	return nil
}

func (t *Trace) descriptor(b []byte) error {
	var d Track
	var proc, thread, counter []byte
	err := fields(b, func(num protowire.Number, _ protowire.Type, v uint64, bs []byte) error {
		switch num {
		case 1:
			d.UUID = v
		case 2:
			d.Name = string(bs)
		case 3:
			proc = bs
		case 4:
			thread = bs
		case 5:
			d.Parent = v
		case 8:
			counter = bs
		}
		return nil
	})
	if err != nil {
		return err
	}
	if d.UUID == 0 {
		return errors.New("track descriptor without uuid")
	}
	if proc != nil {
		d.IsProcess = true
		if err := fields(proc, func(num protowire.Number, _ protowire.Type, v uint64, bs []byte) error {
			switch num {
			case 1:
				d.Pid = int32(v)
			case 2:
				d.Cmdline = append(d.Cmdline, string(bs))
			case 6:
				d.ProcessName = string(bs)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if thread != nil {
		d.IsThread = true
		if err := fields(thread, func(num protowire.Number, _ protowire.Type, v uint64, bs []byte) error {
			switch num {
			case 1:
				d.Pid = int32(v)
			case 2:
				d.Tid = int32(v)
			case 5:
				d.ThreadName = string(bs)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if counter != nil {
		d.IsCounter = true
		if err := fields(counter, func(num protowire.Number, _ protowire.Type, v uint64, _ []byte) error {
			if num == 3 {
				d.Unit = v
			}
			return nil
		}); err != nil {
			return err
		}
	}
	if d.Parent != 0 && t.Tracks[d.Parent] == nil {
		return fmt.Errorf("track %d: parent %d not declared before", d.UUID, d.Parent)
	}
	old := t.Tracks[d.UUID]
	if old == nil {
		nt := d
		t.Tracks[d.UUID] = &nt
		if d.IsProcess {
			t.Processes = append(t.Processes, &nt)
		}
		return nil
	}
	// Declared again (a process named later): same kind of track, same
	// process; names may be added.
	if old.IsProcess != d.IsProcess || old.IsThread != d.IsThread || old.IsCounter != d.IsCounter ||
		old.Pid != d.Pid || old.Tid != d.Tid || old.Parent != d.Parent {
		return fmt.Errorf("track %d declared again differently", d.UUID)
	}
	if d.ProcessName != "" {
		old.ProcessName, old.Cmdline = d.ProcessName, d.Cmdline
	}
	if d.Name != "" {
		old.Name = d.Name
	}
	return nil
}

func (t *Trace) event(ts uint64, b []byte) error {
	var typ, track uint64
	var name string
	var value int64
	var hasValue bool
	args := map[string]string{}
	err := fields(b, func(num protowire.Number, _ protowire.Type, v uint64, bs []byte) error {
		switch num {
		case 9:
			typ = v
		case 11:
			track = v
		case 23:
			name = string(bs)
		case 30:
			value, hasValue = int64(v), true
		case 4:
			var k, val string
			err := fields(bs, func(num protowire.Number, _ protowire.Type, v uint64, s []byte) error {
				switch num {
				case 10:
					k = string(s)
				case 3:
					val = strconv.FormatUint(v, 10)
				case 4:
					val = strconv.FormatInt(int64(v), 10)
				case 7:
					val = fmt.Sprintf("%#x", v)
				case 6:
					val = string(s)
				}
				return nil
			})
			args[k] = val
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	tr := t.Tracks[track]
	if tr == nil {
		return fmt.Errorf("event on track %d, not declared before", track)
	}
	switch typ {
	case 4: // TYPE_COUNTER
		if !tr.IsCounter || !hasValue {
			return fmt.Errorf("counter event on track %d (counter track: %v, value: %v)", track, tr.IsCounter, hasValue)
		}
		tr.Samples = append(tr.Samples, Sample{Ts: ts, Value: value})
	case 3: // TYPE_INSTANT
		if tr.IsCounter {
			return fmt.Errorf("instant %q on counter track %d", name, track)
		}
		t.Instants = append(t.Instants, Instant{Ts: ts, Track: track, Name: name, Args: args})
	case 1, 2: // TYPE_SLICE_BEGIN, TYPE_SLICE_END
		if tr.IsCounter {
			return fmt.Errorf("slice event %q on counter track %d", name, track)
		}
		if typ == 1 && name == "" {
			return fmt.Errorf("slice begin without a name on track %d", track)
		}
		t.SliceEvents = append(t.SliceEvents, SliceEvent{Ts: ts, Track: track, Begin: typ == 1, Name: name, Args: args})
	default:
		return fmt.Errorf("track event of type %d", typ)
	}
	return nil
}

// Sorted returns the samples in time order, ties in file order: how
// trace_processor orders them.
func (tr *Track) Sorted() []Sample {
	s := append([]Sample(nil), tr.Samples...)
	sort.SliceStable(s, func(i, j int) bool { return s[i].Ts < s[j].Ts })
	return s
}

// Last is the value the track ends with (0 if it has no sample); Max its
// largest value (0 if none).
func (tr *Track) Last() int64 {
	s := tr.Sorted()
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1].Value
}

// Max is the track's largest value (0 without samples).
func (tr *Track) Max() int64 {
	var m int64
	for _, s := range tr.Samples {
		m = max(m, s.Value)
	}
	return m
}

var counterName = regexp.MustCompile(`^chip (-?\d+) (\S+)$`)

// allocName is the name of an allocator counter track: "chip 3 DRAM free",
// "chip 3 DRAM largest free block".
var allocName = regexp.MustCompile(`^chip (-?\d+) (\S+) (free|largest free block)$`)

// AllocCounters returns the allocator counter tracks under process track
// p, by chip, buffer type and what they count ("free", "largest free
// block").
func (t *Trace) AllocCounters(p *Track) (map[ChipType]map[string]*Track, error) {
	out := map[ChipType]map[string]*Track{}
	for _, tr := range t.Tracks {
		if !tr.IsCounter || !t.Under(tr, p) {
			continue
		}
		m := allocName.FindStringSubmatch(tr.Name)
		if m == nil {
			continue
		}
		chip, err := strconv.ParseInt(m[1], 10, 32)
		if err != nil {
			return nil, err
		}
		k := ChipType{int32(chip), m[2]}
		if out[k] == nil {
			out[k] = map[string]*Track{}
		}
		if out[k][m[3]] != nil {
			return nil, fmt.Errorf("two counter tracks %q in process %d", tr.Name, p.Pid)
		}
		out[k][m[3]] = tr
	}
	return out, nil
}

// ChipType names a counter track: a chip and a memory type.
type ChipType struct {
	Chip int32
	Type string // DRAM, L1, L1_SMALL, TRACE, SYSTEM_MEMORY, CB, CB_REGISTERED, CB_RESIDENT_TOTAL, L1_BUSIEST_CORE
}

// Under says track tr descends from track p.
func (t *Trace) Under(tr, p *Track) bool {
	for a := t.Tracks[tr.Parent]; a != nil; a = t.Tracks[a.Parent] {
		if a == p {
			return true
		}
		if a.Parent == a.UUID {
			return false
		}
	}
	return false
}

// Counters returns the counter tracks under process track p (at any
// depth), by chip and type, from their names ("chip 3 DRAM"). Two tracks
// with one name are an error.
func (t *Trace) Counters(p *Track) (map[ChipType]*Track, error) {
	out := map[ChipType]*Track{}
	for _, tr := range t.Tracks {
		if !tr.IsCounter || !t.Under(tr, p) {
			continue
		}
		if allocName.MatchString(tr.Name) {
			continue // an allocator track (AllocCounters)
		}
		m := counterName.FindStringSubmatch(tr.Name)
		if m == nil {
			return nil, fmt.Errorf("counter track %q: not named chip N TYPE", tr.Name)
		}
		chip, err := strconv.ParseInt(m[1], 10, 32)
		if err != nil {
			return nil, err
		}
		k := ChipType{int32(chip), m[2]}
		if out[k] != nil {
			return nil, fmt.Errorf("two counter tracks %q in process %d", tr.Name, p.Pid)
		}
		out[k] = tr
	}
	return out, nil
}

// ProcessesOf returns the process tracks of pid in the order they were
// declared (one per incarnation of a reused pid).
func (t *Trace) ProcessesOf(pid uint32) []*Track {
	var out []*Track
	for _, p := range t.Processes {
		if uint32(p.Pid) == pid {
			out = append(out, p)
		}
	}
	return out
}
