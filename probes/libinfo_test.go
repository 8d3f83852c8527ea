package probes

import (
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/tttrace/tttrace/ttmetal"
)

// lib_info.off in the compiled BPF object has LF_COUNT entries (ttmetal's
// TestFieldTableMatchesBPF holds the field table and the enum together).
func TestLibInfoMatchesBPF(t *testing.T) {
	spec, err := loadTttrace()
	if err != nil {
		t.Fatal(err)
	}
	var info *btf.Struct
	if err := spec.Types.TypeByName("lib_info", &info); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, m := range info.Members {
		if m.Name == "off" {
			found = true
			if a, ok := m.Type.(*btf.Array); !ok || a.Nelems != uint32(ttmetal.LFCount) {
				t.Errorf("lib_info.off is %v, want %d entries", m.Type, ttmetal.LFCount)
			}
		}
	}
	if !found {
		t.Error("lib_info has no off")
	}
}

// libInfo puts each value of the layout at its enum index, with the
// vtables and the span.
func TestLibInfoFromTable(t *testing.T) {
	info := libInfo(ttmetal.LayoutV2, &ttmetal.Symbols{VtableDevice: 0x10, VtableMesh: 0x20})
	want := map[ttmetal.LayoutField]int64{
		ttmetal.LFBufferImplPtr: 16, ttmetal.LFDevice: 0, ttmetal.LFSize: 8,
		ttmetal.LFBufferType: 16, ttmetal.LFOwnsData: 27, ttmetal.LFAllocationStatus: 56,
		ttmetal.LFHookedAllocation: 57, ttmetal.LFAddress: 64, ttmetal.LFPageSize: -1,
		ttmetal.LFDeviceID: 8, ttmetal.LFBufferTypeWidth: 4,
	}
	for k, v := range want {
		if info.Off[k] != v {
			t.Errorf("off[%d] = %d, want %d", k, info.Off[k], v)
		}
	}
	if info.VtableDevice != 0x10 || info.VtableMesh != 0x20 {
		t.Errorf("vtables %+v", info)
	}
	for _, l := range []ttmetal.Layout{ttmetal.LayoutV0, ttmetal.LayoutV1, ttmetal.LayoutV2} {
		lo, n := l.Span()
		if info := libInfo(l, &ttmetal.Symbols{}); info.SpanLo != lo || info.SpanLen != n {
			t.Errorf("%s: lib_info span %d+%d, want %d+%d", l.Name, info.SpanLo, info.SpanLen, lo, n)
		}
	}
}
