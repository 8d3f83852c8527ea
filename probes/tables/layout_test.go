package tables

import (
	"reflect"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/tttrace/tttrace/internal/gennames"
)

// bpfObject is the committed BPF object (probes/gen.go makes it), read
// from its file: its BTF is bpf/'s own account of the layouts.
func bpfObject() (*ebpf.CollectionSpec, error) {
	return ebpf.LoadCollectionSpec("../tttrace_x86_bpfel.o")
}

// checkLayout: Go struct v has a field for each member of the C struct
// name, named as bpf2go names it (the words of its name capitalized), at the same offset and of the same
// size, and nothing else.
func checkLayout(t *testing.T, types *btf.Spec, name string, v any) {
	t.Helper()
	var st *btf.Struct
	if err := types.TypeByName(name, &st); err != nil {
		t.Fatalf("struct %s: %v", name, err)
	}
	goType := reflect.TypeOf(v)
	if goType.Size() != uintptr(st.Size) {
		t.Errorf("struct %s: %d bytes in C, %s has %d", name, st.Size, goType, goType.Size())
	}
	fields := map[string]reflect.StructField{}
	for i := range goType.NumField() {
		if f := goType.Field(i); f.Name != "_" {
			fields[f.Name] = f
		}
	}
	for _, m := range st.Members {
		goName := gennames.Camel(strings.ToUpper(m.Name))
		f, ok := fields[goName]
		if !ok {
			t.Errorf("struct %s: %s has no field %s (member %s)", name, goType, goName, m.Name)
			continue
		}
		delete(fields, goName)
		size, err := btf.Sizeof(m.Type)
		if err != nil {
			t.Fatal(err)
		}
		if f.Offset != uintptr(m.Offset.Bytes()) || f.Type.Size() != uintptr(size) {
			t.Errorf("struct %s: %s at %d, %d bytes in C; %s.%s at %d, %d bytes",
				name, m.Name, m.Offset.Bytes(), size, goType, f.Name, f.Offset, f.Type.Size())
		}
	}
	for n := range fields {
		t.Errorf("struct %s: %s.%s is no member of it", name, goType, n)
	}
}

// TestLayoutsMatchBPF: the values this package writes into the maps are
// laid out as bpf/ declares them, and its pid flags are enum pid_flag's.
func TestLayoutsMatchBPF(t *testing.T) {
	spec, err := bpfObject()
	if err != nil {
		t.Fatal(err)
	}
	checkLayout(t, spec.Types, "stack_step_slot", stepSlot{})
	checkLayout(t, spec.Types, "stack_site_slot", siteSlot{})
	for name, want := range map[string]uint32{"stack_steps": uint32(reflect.TypeFor[stepSlot]().Size()), "stack_sites": uint32(reflect.TypeFor[siteSlot]().Size()), "traced_pids": pidBytes} {
		if m := spec.Maps[name]; m == nil || m.ValueSize != want {
			t.Errorf("map %s: %+v, want values of %d bytes", name, m, want)
		}
	}
	var pt *btf.Struct
	if err := spec.Types.TypeByName("pid_table", &pt); err != nil || pt.Size != pidBytes {
		t.Errorf("struct pid_table: %v (err %v), want %d bytes", pt, err, pidBytes)
	}
	var flags *btf.Enum
	if err := spec.Types.TypeByName("pid_flag", &flags); err != nil {
		t.Fatal(err)
	}
	want := map[string]PidFlag{"PID_TRACED": PidTraced, "PID_PYTHON": PidPython, "PID_HEIR": PidHeir}
	for _, v := range flags.Values {
		if f, ok := want[v.Name]; ok {
			if uint64(f) != v.Value {
				t.Errorf("%s is %d in bpf/, %d here", v.Name, v.Value, f)
			}
			delete(want, v.Name)
		}
	}
	for n := range want {
		t.Errorf("enum pid_flag has no %s", n)
	}
}
