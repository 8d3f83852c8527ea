package ttmetal

import (
	"encoding/binary"
	"strings"
	"testing"
)

// uidFixtureSrc is rootFixtureSrc with 2026's Device::shm_stats_provider_
// after default_allocator_ and upstream's SharedMemoryStatsProvider
// members (memory_stats_shm.hpp); the compiler's offsets as off_*.
var uidFixtureSrc = strings.NewReplacer(
	"class MetalContext;\n",
	"class MetalContext;\nclass SharedMemoryStatsProvider {\npublic:\n    ~SharedMemoryStatsProvider();\n    unsigned long asic_id_;\n    int device_id_;\n    int shm_fd_;\n    void* region_;\n    bool per_pid_tracking_enabled_;\n};\nSharedMemoryStatsProvider::~SharedMemoryStatsProvider() = default;\n",
	"    std::unique_ptr<AllocatorImpl> default_allocator_;\n};",
	"    std::unique_ptr<AllocatorImpl> default_allocator_;\n    std::unique_ptr<SharedMemoryStatsProvider> shm_stats_provider_;\n};",
	"extern const long off_trace = offsetof(AllocatorImpl, trace_buffer_manager_);\n",
	"extern const long off_trace = offsetof(AllocatorImpl, trace_buffer_manager_);\nextern const long off_shm = offsetof(Device, shm_stats_provider_);\nextern const long off_asic = offsetof(SharedMemoryStatsProvider, asic_id_);\nextern const long off_did = offsetof(SharedMemoryStatsProvider, device_id_);\n",
).Replace(rootFixtureSrc)

func TestUIDLayoutFromDWARF(t *testing.T) {
	if !strings.Contains(uidFixtureSrc, "off_did") || !strings.Contains(uidFixtureSrc, "shm_stats_provider_;") {
		t.Fatal("the fixture's replacements did not apply")
	}
	for _, cc := range []string{"g++", "clang++"} {
		t.Run(cc, func(t *testing.T) {
			lib, ls := fixtureLayouts(t, cc, "uid.cpp", uidFixtureSrc)
			if ls.RootErr != nil {
				t.Fatal(ls.RootErr)
			}
			l := ls.Root
			if l.UID == nil {
				t.Fatalf("no UID layout: %v", l.UIDErr)
			}
			names := []string{"off_shm", "off_asic", "off_did"}
			syms, err := lib.lookup(names)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int64{}
			for _, n := range names {
				b, err := lib.Bytes(syms[n].Value, 8)
				if err != nil {
					t.Fatalf("%s: %v", n, err)
				}
				want[n] = int64(binary.LittleEndian.Uint64(b))
			}
			if l.UID.Provider != want["off_shm"] || l.UID.AsicID != want["off_asic"] || l.UID.DeviceID != want["off_did"] {
				t.Errorf("UID layout %+v, compiler says %v", *l.UID, want)
			}
		})
	}
	// Without the member (a TT-Metal with no SHM counters): the root is
	// still read, the unique ids are not, and why says so.
	_, ls := fixtureLayouts(t, "g++", "root.cpp", rootFixtureSrc)
	if ls.RootErr != nil || ls.Root.UID != nil || ls.Root.UIDErr == nil || !strings.Contains(ls.Root.UIDErr.Error(), "shm_stats_provider_") {
		t.Errorf("no provider: root err %v, UID %+v, why %v", ls.RootErr, ls.Root.UID, ls.Root.UIDErr)
	}
}

func TestReadChipUID(t *testing.T) {
	l := testRoot
	l.UID = &UIDLayout{Provider: 24, AsicID: 0, DeviceID: 8}
	le := binary.LittleEndian
	// The Device at 0x1000 (its provider pointer at +24), the provider at
	// 0x2000: asic id, device id.
	mem := func(prov uint64, asic uint64, did int32) fakeMem {
		dev := make([]byte, 32)
		le.PutUint64(dev[24:], prov)
		p := make([]byte, 16)
		le.PutUint64(p, asic)
		le.PutUint32(p[8:], uint32(did))
		return fakeMem{0x1000: dev, 0x2000: p}
	}
	if u := readChipUID(mem(0x2000, 0x7766554433221100, 5), 0x1000, 5, &l); !u.Known || u.ID != 0x7766554433221100 || u.Why != "" {
		t.Errorf("good provider: %+v", u)
	}
	for name, c := range map[string]struct {
		m    fakeMem
		want string
	}{
		"null provider":  {mem(0, 1, 5), "no SHM provider"},
		"other chip's":   {mem(0x2000, 1, 6), "names chip 6"},
		"unreadable":     {mem(0x3000, 1, 5), "SHM provider at 0x3000"},
		"zero id":        {mem(0x2000, 0, 5), "unique id 0"},
		"unreadable dev": {fakeMem{}, "Device at 0x1000"},
	} {
		if u := readChipUID(c.m, 0x1000, 5, &l); u.Known || !strings.Contains(u.Why, c.want) {
			t.Errorf("%s: %+v, want why with %q", name, u, c.want)
		}
	}
	// No layout: why is the layout's.
	if u := readChipUID(mem(0x2000, 1, 5), 0x1000, 5, &testRoot); u.Known || u.Why == "" {
		t.Errorf("no layout: %+v", u)
	}
}
