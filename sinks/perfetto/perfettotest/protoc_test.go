package perfettotest

import (
	"strconv"
	"strings"
	"testing"
)

// td is a track_descriptor packet as protoc --decode prints it.
func td(uuid, parent uint64, name string, counter bool, ordering string, rank int64) *Node {
	d := &Node{Name: "track_descriptor"}
	d.Children = append(d.Children, &Node{Name: "uuid", Value: strconv.FormatUint(uuid, 10)})
	if parent != 0 {
		d.Children = append(d.Children, &Node{Name: "parent_uuid", Value: strconv.FormatUint(parent, 10)})
	}
	if name != "" {
		d.Children = append(d.Children, &Node{Name: "name", Value: strconv.Quote(name)})
	}
	if counter {
		d.Children = append(d.Children, &Node{Name: "counter", Children: []*Node{{Name: "unit", Value: "UNIT_SIZE_BYTES"}}})
	}
	if ordering != "" {
		d.Children = append(d.Children, &Node{Name: "child_ordering", Value: ordering})
	}
	if rank >= 0 {
		d.Children = append(d.Children, &Node{Name: "sibling_order_rank", Value: strconv.FormatInt(rank, 10)})
	}
	return &Node{Children: []*Node{{Name: "timestamp_clock_id", Value: "3"}, d}}
}

// chipOf is a timeline of one process with chip 2 and its counters, in the
// order given, ranked as given.
func chipOf(counters []string, ranks []int64) []*Node {
	ps := []*Node{
		{Children: []*Node{{Name: "clock_snapshot", Children: []*Node{
			{Name: "clocks", Children: []*Node{{Name: "clock_id", Value: "3"}}},
			{Name: "clocks", Children: []*Node{{Name: "clock_id", Value: "6"}}},
			{Name: "primary_trace_clock", Value: "BUILTIN_CLOCK_BOOTTIME"},
		}}}},
		{Children: []*Node{{Name: "timestamp_clock_id", Value: "3"}, {Name: "track_descriptor", Children: []*Node{
			{Name: "uuid", Value: "1"}, {Name: "process", Children: []*Node{{Name: "pid", Value: "7"}}}}}}},
		td(2, 1, "device memory", false, "EXPLICIT", -1),
		td(3, 2, "chip 2", false, "EXPLICIT", 2),
	}
	for i, n := range counters {
		ps = append(ps, td(uint64(10+i), 3, n, true, "", ranks[i]))
	}
	return ps
}

// The memory types then the allocator's counters, in tttrace's order, pass;
// an allocator counter out of place, misnamed or under another chip fails.
func TestCheckSchemaAllocatorCounters(t *testing.T) {
	good := []string{"chip 2 DRAM", "chip 2 L1", "chip 2 CB",
		"chip 2 DRAM free", "chip 2 DRAM largest free block", "chip 2 L1 free", "chip 2 L1 largest free block",
		"chip 2 SYSTEM_MEMORY free", "chip 2 SYSTEM_MEMORY largest free block"}
	ranks := []int64{0, 1, 5, 6, 7, 8, 9, 14, 15}
	if bad := CheckSchema(chipOf(good, ranks)); len(bad) != 0 {
		t.Fatalf("tttrace's order refused: %q", bad)
	}
	for _, c := range []struct {
		names []string
		ranks []int64
		want  string
	}{
		// SYSTEM_MEMORY's counters ranked by TT-Metal's numbering (2),
		// before L1_SMALL's.
		{[]string{"chip 2 DRAM", "chip 2 SYSTEM_MEMORY free", "chip 2 L1_SMALL free"}, []int64{0, 10, 12}, "comes after"},
		// largest free block before free.
		{[]string{"chip 2 DRAM", "chip 2 DRAM largest free block", "chip 2 DRAM free"}, []int64{0, 6, 7}, "comes after"},
		// an allocator counter before a memory type.
		{[]string{"chip 2 DRAM free", "chip 2 L1"}, []int64{0, 1}, "comes after"},
		{[]string{"chip 2 DRAM", "chip 2 DRAM bytes free"}, []int64{0, 6}, "not named as its siblings"},
		{[]string{"chip 2 DRAM", "chip 2 CB free"}, []int64{0, 6}, "not named as its siblings"},
		{[]string{"chip 2 DRAM", "chip 3 DRAM free"}, []int64{0, 6}, "another chip's counter"},
		{[]string{"chip 2 DRAM", "chip 2 DRAM free"}, []int64{0, -1}, "no sibling_order_rank"},
	} {
		bad := CheckSchema(chipOf(c.names, c.ranks))
		if !strings.Contains(strings.Join(bad, "\n"), c.want) {
			t.Errorf("%q ranked %v: %q, want %q", c.names, c.ranks, bad, c.want)
		}
	}
}
