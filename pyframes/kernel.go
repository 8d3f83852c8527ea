package pyframes

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf/btf"
)

// taskFSBase is offsetof(struct task_struct, thread.fsbase) in the running
// kernel, from its BTF: 3.10 names its threads by pthread_self(), which is
// the fs base on x86-64. Read once.
var taskFSBase = sync.OnceValues(func() (int64, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return -1, fmt.Errorf("kernel BTF: %w", err)
	}
	var task *btf.Struct
	if err := spec.TypeByName("task_struct", &task); err != nil {
		return -1, fmt.Errorf("kernel BTF: %w", err)
	}
	off, err := memberBits(task, "thread", "fsbase")
	if err != nil {
		return -1, fmt.Errorf("kernel BTF: task_struct: %w", err)
	}
	return off, nil
})

// membersOf lists the members of a struct or union.
func membersOf(t btf.Type) ([]btf.Member, bool) {
	switch v := btf.UnderlyingType(t).(type) {
	case *btf.Struct:
		return v.Members, true
	case *btf.Union:
		return v.Members, true
	}
	return nil, false
}

// memberBits finds a member path in a BTF struct and returns its byte
// offset; members of anonymous structs and unions are searched through.
func memberBits(s btf.Type, path ...string) (int64, error) {
	var walk func(members []btf.Member, name string, base btf.Bits) (btf.Type, btf.Bits, bool)
	walk = func(members []btf.Member, name string, base btf.Bits) (btf.Type, btf.Bits, bool) {
		for _, m := range members {
			if m.Name == name {
				return m.Type, base + m.Offset, true
			}
			if inner, ok := membersOf(m.Type); ok && m.Name == "" {
				if t, o, ok := walk(inner, name, base+m.Offset); ok {
					return t, o, true
				}
			}
		}
		return nil, 0, false
	}
	cur := s
	var bits btf.Bits
	for _, name := range path {
		members, ok := membersOf(cur)
		if !ok {
			return -1, fmt.Errorf("%s: not a struct", name)
		}
		t, o, ok := walk(members, name, bits)
		if !ok {
			return -1, fmt.Errorf("no member %s", name)
		}
		cur, bits = t, o
	}
	if bits%8 != 0 {
		return -1, errors.New("not a byte-aligned member")
	}
	return int64(bits / 8), nil
}
