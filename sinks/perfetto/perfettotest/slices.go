package perfettotest

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// SliceEvent is a TYPE_SLICE_BEGIN (Begin) or TYPE_SLICE_END track event.
type SliceEvent struct {
	Ts    uint64
	Track uint64
	Begin bool
	Name  string            // begins only
	Args  map[string]string // values printed with %v
}

// Slice is a slice of a track, as trace_processor makes it from begins
// and ends.
type Slice struct {
	Track      uint64
	Ts         uint64
	End        uint64 // when Ended
	Ended      bool
	Name       string
	Args       map[string]string
	Depth      int    // its ancestors
	Parent     *Slice // nil at depth 0
	FileOrder  int    // its begin's place among the track's slice events in the file
	childCount int
}

// Calls is the slice's "calls" argument (a gathered slice's number of
// calls), 1 without one.
func (s *Slice) Calls() uint64 {
	if v, ok := s.Args["calls"]; ok {
		n, _ := strconv.ParseUint(v, 10, 64)
		return n
	}
	return 1
}

// Children reports how many slices s has directly inside it.
func (s *Slice) Children() int { return s.childCount }

// Path is the names from the outermost slice down to s, joined by " > ".
func (s *Slice) Path() string {
	var names []string
	for a := s; a != nil; a = a.Parent {
		names = append(names, a.Name)
	}
	for i, j := 0, len(names)-1; i < j; i, j = i+1, j-1 {
		names[i], names[j] = names[j], names[i]
	}
	return strings.Join(names, " > ")
}

// Slices nests the slice events of each track the way trace_processor
// does: ordered by timestamp (ties in file order), a begin opens a slice
// inside the innermost open one, an end closes the innermost. It returns,
// by track, the slices in the order they begin. An end with no slice open
// is an error (trace_processor drops it); slices left open are not ended.
func Slices(evs []SliceEvent) (map[uint64][]*Slice, error) {
	byTrack := map[uint64][]SliceEvent{}
	for _, e := range evs {
		byTrack[e.Track] = append(byTrack[e.Track], e)
	}
	out := map[uint64][]*Slice{}
	for track, es := range byTrack {
		order := make([]int, len(es))
		for i := range order {
			order[i] = i
		}
		sort.SliceStable(order, func(i, j int) bool { return es[order[i]].Ts < es[order[j]].Ts })
		var open []*Slice
		for _, i := range order {
			e := es[i]
			if e.Begin {
				s := &Slice{Track: track, Ts: e.Ts, Name: e.Name, Args: e.Args, Depth: len(open), FileOrder: i}
				if len(open) > 0 {
					s.Parent = open[len(open)-1]
					s.Parent.childCount++
				}
				open = append(open, s)
				out[track] = append(out[track], s)
				continue
			}
			if len(open) == 0 {
				return nil, fmt.Errorf("track %d: a slice end at %d with no slice open", track, e.Ts)
			}
			s := open[len(open)-1]
			s.End, s.Ended = e.Ts, true
			open = open[:len(open)-1]
		}
	}
	return out, nil
}

// ProtocSliceEvents are the slice events of packets decoded by Protoc,
// in file order: the same as Decode's SliceEvents, read through the
// official schema's field names.
func ProtocSliceEvents(packets []*Node) ([]SliceEvent, error) {
	var out []SliceEvent
	for _, p := range packets {
		te := p.Child("track_event")
		if te == nil {
			continue
		}
		typ := te.Get("type")
		if typ != "TYPE_SLICE_BEGIN" && typ != "TYPE_SLICE_END" {
			continue
		}
		ts, err := strconv.ParseUint(p.Get("timestamp"), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("slice event without a timestamp: %v", err)
		}
		track, err := strconv.ParseUint(te.Get("track_uuid"), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("slice event without a track: %v", err)
		}
		e := SliceEvent{Ts: ts, Track: track, Begin: typ == "TYPE_SLICE_BEGIN", Args: map[string]string{}}
		if n := te.Get("name"); n != "" {
			if e.Name, err = strconv.Unquote(n); err != nil {
				return nil, fmt.Errorf("slice name %s: %v", n, err)
			}
		}
		for _, c := range te.Children {
			if c.Name != "debug_annotations" {
				continue
			}
			k, err := strconv.Unquote(c.Get("name"))
			if err != nil {
				return nil, fmt.Errorf("debug annotation name %q: %v", c.Get("name"), err)
			}
			switch {
			case c.Get("uint_value") != "":
				e.Args[k] = c.Get("uint_value")
			case c.Get("int_value") != "":
				e.Args[k] = c.Get("int_value")
			case c.Get("string_value") != "":
				if e.Args[k], err = strconv.Unquote(c.Get("string_value")); err != nil {
					return nil, err
				}
			case c.Get("pointer_value") != "":
				v, _ := strconv.ParseUint(c.Get("pointer_value"), 10, 64)
				e.Args[k] = fmt.Sprintf("%#x", v)
			}
		}
		out = append(out, e)
	}
	return out, nil
}
