package perfettotest

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// Node is one field of a message as `protoc --decode` prints it: a value
// (Value) or a nested message (Children).
type Node struct {
	Name     string
	Value    string
	Children []*Node
}

// Get is the value of the first child named name ("" when none).
func (n *Node) Get(name string) string {
	if c := n.Child(name); c != nil {
		return c.Value
	}
	return ""
}

// Child is the first child named name, nil when none.
func (n *Node) Child(name string) *Node {
	for _, c := range n.Children {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// SchemaProto is the vendored official perfetto_trace.proto.
func SchemaProto() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "perfetto_trace.proto")
}

// Protoc decodes a trace with `protoc --decode=perfetto.protos.Trace`
// against Perfetto's official schema and returns its packets.
func Protoc(protoc string, trace []byte) ([]*Node, error) {
	proto := SchemaProto()
	cmd := exec.Command(protoc, "--proto_path="+filepath.Dir(proto), "--decode=perfetto.protos.Trace", filepath.Base(proto))
	cmd.Stdin = bytes.NewReader(trace)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("protoc --decode: %v: %s", err, errb.String())
	}
	root := &Node{}
	stack := []*Node{root}
	sc := bufio.NewScanner(&out)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		top := stack[len(stack)-1]
		switch {
		case line == "":
		case line == "}":
			if len(stack) == 1 {
				return nil, fmt.Errorf("protoc output line %d: unbalanced }", n)
			}
			stack = stack[:len(stack)-1]
		case strings.HasSuffix(line, " {") && !strings.Contains(line, ":"):
			c := &Node{Name: strings.TrimSuffix(line, " {")}
			top.Children = append(top.Children, c)
			stack = append(stack, c)
		default:
			name, val, ok := strings.Cut(line, ": ")
			if !ok {
				return nil, fmt.Errorf("protoc output line %d: %q", n, line)
			}
			top.Children = append(top.Children, &Node{Name: name, Value: val})
		}
	}
	if len(stack) != 1 {
		return nil, fmt.Errorf("protoc output: %d messages left open", len(stack)-1)
	}
	return root.Children, sc.Err()
}

var (
	digits        = regexp.MustCompile(`^[0-9]+$`)
	chipTrack     = regexp.MustCompile(`^"chip (-?\d+)"$`)
	counterQuoted = regexp.MustCompile(`^"chip (-?\d+) (\S+)"$`)
	allocQuoted   = regexp.MustCompile(`^"chip (-?\d+) (\S+) (free|largest free block)"$`)
	typeOrder     = map[string]int{"DRAM": 0, "L1": 1, "L1_SMALL": 2, "TRACE": 3, "SYSTEM_MEMORY": 4, "CB": 5, "CB_REGISTERED": 6, "CB_RESIDENT_TOTAL": 7, "L1_BUSIEST_CORE": 8}
)

// counterKey is where a counter track named name (quoted) belongs among
// its chip's counters, and the chip its name gives: the memory types
// first ("chip 3 DRAM", ... "chip 3 CB", "chip 3 CB_REGISTERED", "chip 3
// CB_RESIDENT_TOTAL", "chip 3 L1_BUSIEST_CORE"), then for each buffer type
// in the same order its allocator counters, "free" before "largest free
// block" ("chip 3 DRAM free", "chip 3 DRAM largest free block", "chip 3 L1
// free", ...). The CB types and L1_BUSIEST_CORE have no allocator. ok is
// false for any other name.
func counterKey(name string) (chip string, key int64, ok bool) {
	if m := allocQuoted.FindStringSubmatch(name); m != nil {
		o, known := typeOrder[m[2]]
		if !known || strings.HasPrefix(m[2], "CB") || m[2] == "L1_BUSIEST_CORE" {
			return "", 0, false
		}
		key = int64(len(typeOrder) + 2*o)
		if m[3] == "largest free block" {
			key++
		}
		return m[1], key, true
	}
	if m := counterQuoted.FindStringSubmatch(name); m != nil {
		o, known := typeOrder[m[2]]
		return m[1], int64(o), known
	}
	return "", 0, false
}

// Desc is a track descriptor as decoded.
type Desc struct {
	UUID, Parent uint64
	Name         string // quoted, as protoc prints it
	Ordering     string
	Rank         int64
	HasRank      bool
	Process      bool
	Counter      bool
	order        int
}

// Descriptors are the track descriptors of the packets, by uuid (a uuid
// declared again keeps its first declaration, merged with names added).
func Descriptors(packets []*Node) map[uint64]*Desc {
	out := map[uint64]*Desc{}
	for _, p := range packets {
		td := p.Child("track_descriptor")
		if td == nil {
			continue
		}
		u, _ := strconv.ParseUint(td.Get("uuid"), 10, 64)
		d := out[u]
		if d == nil {
			d = &Desc{UUID: u, order: len(out)}
			out[u] = d
		}
		d.Parent, _ = strconv.ParseUint(td.Get("parent_uuid"), 10, 64)
		if v := td.Get("name"); v != "" {
			d.Name = v
		}
		d.Ordering = td.Get("child_ordering")
		if v := td.Get("sibling_order_rank"); v != "" {
			d.Rank, _ = strconv.ParseInt(v, 10, 64)
			d.HasRank = true
		}
		d.Process = d.Process || td.Child("process") != nil
		d.Counter = d.Counter || td.Child("counter") != nil
	}
	return out
}

// CheckSchema lists what trace_processor would misread in a decoded
// tttrace timeline: a field the official schema does not know; no clock
// snapshot of MONOTONIC and BOOTTIME, or a track packet whose stamps are
// not said to be MONOTONIC; a counter track right under a process track
// (trace_processor orders those by name); chip tracks or counter tracks
// whose parent does not order them explicitly, or whose ranks do not give
// tttrace's order (chips by id; under a chip, memory types DRAM, L1,
// L1_SMALL, TRACE, SYSTEM_MEMORY, CB, CB_REGISTERED, CB_RESIDENT_TOTAL,
// L1_BUSIEST_CORE, then the allocator's "free" and
// "largest free block" counters per buffer type in that order); a counter
// track named after another chip than its parent's.
func CheckSchema(packets []*Node) []string {
	var bad []string
	var walk func(path string, n *Node)
	walk = func(path string, n *Node) {
		if digits.MatchString(n.Name) {
			bad = append(bad, fmt.Sprintf("unknown field %s%s", path, n.Name))
		}
		for _, c := range n.Children {
			walk(path+n.Name+".", c)
		}
	}
	clocks := false
	for _, p := range packets {
		walk("", p)
		if cs := p.Child("clock_snapshot"); cs != nil {
			ids := map[string]bool{}
			for _, c := range cs.Children {
				if c.Name == "clocks" {
					ids[c.Get("clock_id")] = true
				}
			}
			clocks = clocks || (ids["3"] && ids["6"] && cs.Get("primary_trace_clock") == "BUILTIN_CLOCK_BOOTTIME")
			continue
		}
		if (p.Child("track_event") != nil || p.Child("track_descriptor") != nil) && p.Get("timestamp_clock_id") != "3" {
			bad = append(bad, fmt.Sprintf("a track packet at %s without timestamp_clock_id 3 (MONOTONIC)", p.Get("timestamp")))
		}
	}
	if !clocks {
		bad = append(bad, "no clock snapshot with MONOTONIC (3) and BOOTTIME (6), BOOTTIME primary")
	}
	ds := Descriptors(packets)
	kids := map[uint64][]*Desc{}
	for _, d := range ds {
		if d.Parent != 0 {
			kids[d.Parent] = append(kids[d.Parent], d)
		}
	}
	for pu, ks := range kids {
		parent := ds[pu]
		if parent == nil {
			bad = append(bad, fmt.Sprintf("tracks under undeclared parent %d", pu))
			continue
		}
		var key func(d *Desc) (int64, bool)
		switch {
		case ks[0].Counter:
			key = func(d *Desc) (int64, bool) {
				_, k, ok := counterKey(d.Name)
				return k, ok
			}
			if pm := chipTrack.FindStringSubmatch(parent.Name); pm != nil {
				for _, d := range ks {
					if chip, _, ok := counterKey(d.Name); ok && chip != pm[1] {
						bad = append(bad, fmt.Sprintf("track %s under %s: another chip's counter", d.Name, parent.Name))
					}
				}
			}
		case chipTrack.MatchString(ks[0].Name):
			key = func(d *Desc) (int64, bool) {
				m := chipTrack.FindStringSubmatch(d.Name)
				if m == nil {
					return 0, false
				}
				v, err := strconv.ParseInt(m[1], 10, 64)
				return v, err == nil
			}
		default:
			continue // thread tracks, "device memory", the tttrace track
		}
		if parent.Process {
			bad = append(bad, fmt.Sprintf("%s right under the process track %d: trace_processor orders those by name", ks[0].Name, pu))
		}
		if parent.Ordering != "EXPLICIT" {
			bad = append(bad, fmt.Sprintf("track %s (parent of %s): child_ordering %q, not EXPLICIT", parent.Name, ks[0].Name, parent.Ordering))
		}
		sort.Slice(ks, func(i, j int) bool {
			return ks[i].Rank < ks[j].Rank || (ks[i].Rank == ks[j].Rank && ks[i].order < ks[j].order)
		})
		for i, d := range ks {
			k, ok := key(d)
			if !ok {
				bad = append(bad, fmt.Sprintf("track %s among %s: not named as its siblings", d.Name, ks[0].Name))
				continue
			}
			if !d.HasRank {
				bad = append(bad, fmt.Sprintf("track %s has no sibling_order_rank", d.Name))
			}
			if i > 0 {
				if pk, _ := key(ks[i-1]); pk >= k {
					bad = append(bad, fmt.Sprintf("under %s, %s (rank %d) comes after %s (rank %d)", parent.Name, d.Name, d.Rank, ks[i-1].Name, ks[i-1].Rank))
				}
			}
		}
	}
	return bad
}
