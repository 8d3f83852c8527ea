package events

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// BufferType's numbering is TT-Metal's (the wire carries Buffer::buffer_type_
// as read): the constants here, the wire's statement of it (bpf/wire.h,
// struct event's buffer_type), the number the BPF program compares with
// (bpf/tttrace.bpf.c) and the replica's enum (TT-Metal's, as the tests
// build it) must all be one numbering.
func TestBufferTypeNumbering(t *testing.T) {
	read := func(path string) string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	check := func(where, name string, n int) {
		t.Helper()
		got, ok := ParseBufferType(name)
		if !ok || int(got) != n || got.String() != name {
			t.Errorf("%s: %s = %d, events has %d (%v)", where, name, n, got, ok)
		}
	}

	wire := regexp.MustCompile(`__s32 buffer_type; /\* BufferType \(([^)]*)\) \*/`).FindStringSubmatch(read("../bpf/wire.h"))
	if wire == nil {
		t.Fatal("bpf/wire.h: struct event's buffer_type does not state the numbering")
	}
	pairs := strings.Split(wire[1], ", ")
	if len(pairs) != NumBufferTypes {
		t.Errorf("bpf/wire.h states %d buffer types, events has %d", len(pairs), NumBufferTypes)
	}
	for _, p := range pairs {
		name, num, _ := strings.Cut(p, " ")
		n, err := strconv.Atoi(num)
		if err != nil {
			t.Fatalf("bpf/wire.h: %q", p)
		}
		check("bpf/wire.h", name, n)
	}

	bpf := regexp.MustCompile(`buffer_type == (\d+) /\* (\w+)`).FindAllStringSubmatch(read("../bpf/tttrace.bpf.c"), -1)
	if len(bpf) == 0 {
		t.Fatal("bpf/tttrace.bpf.c compares buffer_type with no number: update this test")
	}
	for _, m := range bpf {
		n, _ := strconv.Atoi(m[1])
		check("bpf/tttrace.bpf.c", m[2], n)
	}

	types := read("../testdata/replica/include/tt_metal/types.hpp")
	i := strings.Index(types, "enum class BufferType")
	if i < 0 {
		t.Fatal("the replica has no enum class BufferType")
	}
	body := types[i:]
	body = body[strings.Index(body, "{")+1 : strings.Index(body, "}")]
	enum := regexp.MustCompile(`(\w+) = (\d+)`).FindAllStringSubmatch(body, -1)
	if len(enum) != NumBufferTypes {
		t.Errorf("the replica's BufferType has %d values, events %d", len(enum), NumBufferTypes)
	}
	for _, m := range enum {
		n, _ := strconv.Atoi(m[2])
		check("replica", m[1], n)
	}
}
