package ttmetal

import (
	"encoding/binary"
	"os"
	"testing"
)

// Both allocator layouts from one library's DWARF, each offset compared
// with the compiler's offsetof (testdata/allocator_layouts.cpp).
func TestAllocatorLayoutsFromDWARF(t *testing.T) {
	src, err := os.ReadFile("testdata/allocator_layouts.cpp")
	if err != nil {
		t.Fatal(err)
	}
	for _, cc := range []string{"g++", "clang++"} {
		t.Run(cc, func(t *testing.T) {
			lib, ls := fixtureLayouts(t, cc, "alloc.cpp", string(src))
			if ls.BankManagerErr != nil || ls.RootErr != nil {
				t.Fatalf("bank manager: %v; root: %v", ls.BankManagerErr, ls.RootErr)
			}
			bm, root := ls.BankManager, ls.Root
			got := map[string]int64{
				"off_buffer_type": bm.BufferType, "off_bank_map": bm.BankMap, "off_address_limit": bm.AddressLimit,
				"off_alignment": bm.Alignment, "off_allocators": bm.Allocators, "off_max_size": bm.MaxSize,
				"off_offset": bm.Offset, "off_block_address": bm.BlockAddress, "off_meta_allocated": bm.MetaAllocated,
				"off_dm": root.DeviceManager, "off_devices": root.Devices, "off_id": root.DeviceID, "off_alloc": root.DeviceAlloc,
			}
			names := []string{"off_l1"}
			for n := range got {
				names = append(names, n)
			}
			syms, err := lib.lookup(names)
			if err != nil {
				t.Fatal(err)
			}
			want := func(n string) int64 {
				s, ok := syms[n]
				if !ok {
					t.Fatalf("fixture has no %s", n)
				}
				b, err := lib.Bytes(s.Value, 8)
				if err != nil {
					t.Fatalf("%s: %v", n, err)
				}
				return int64(binary.LittleEndian.Uint64(b))
			}
			for n, g := range got {
				if w := want(n); g != w {
					t.Errorf("%s: %d, compiler says %d", n, g, w)
				}
			}
			if len(root.Managers) != 4 || root.Managers[1] != want("off_l1") {
				t.Errorf("managers at %v, want 4 with l1_manager_ second at %d", root.Managers, want("off_l1"))
			}
		})
	}
}
