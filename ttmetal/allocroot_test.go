package ttmetal

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/elfx"
)

// rootFixtureSrc has upstream's 2026 shapes of the root of the open chips
// (docs/ttmetal.md §9, "Finding the allocators at attach"): members before
// and after the ones read, AllocatorImpl with its four named managers. The
// compiler's own offsets are exported as off_* for the test to compare.
const rootFixtureSrc = `
#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>
namespace tt::tt_metal {
class BankManager { public: int buffer_type_; };
class AllocatorImpl {
public:
    virtual ~AllocatorImpl();
    mutable std::mutex mutex_;
    bool allocations_unsafe_ = false;
    std::unique_ptr<BankManager> dram_manager_;
    std::unique_ptr<BankManager> l1_manager_;
    std::unique_ptr<BankManager> l1_small_manager_;
    std::unique_ptr<BankManager> trace_buffer_manager_;
    std::unordered_map<unsigned, unsigned> bank_id_to_dram_channel_;
};
AllocatorImpl::~AllocatorImpl() = default;
class IDevice { public: virtual ~IDevice(); };
IDevice::~IDevice() = default;
class MetalContext;
class Device : public IDevice {
public:
    MetalContext* context_ = nullptr;
    void* env_ = nullptr;
    int id_ = 0;
    std::vector<std::vector<int>> tunnels_from_mmio_;
    bool initialized_ = false;
    std::vector<int> more_;
    std::unique_ptr<AllocatorImpl> default_allocator_;
};
class DeviceManager {
public:
    unsigned char num_hw_cqs_{};
    bool is_initialized_ = false;
    mutable std::mutex lock_;
    std::vector<std::unique_ptr<Device>> devices_;
};
class MetalContext {
public:
    bool initialized_ = false;
    void* env_ = nullptr;
    std::unique_ptr<DeviceManager> device_manager_;
};
std::array<std::atomic<MetalContext*>, 32> g_instances{};
Device dev;
DeviceManager dm;
MetalContext mc;
}  // namespace tt::tt_metal
using namespace tt::tt_metal;
extern "C" {
extern const long off_dm = offsetof(MetalContext, device_manager_);
extern const long off_devices = offsetof(DeviceManager, devices_);
extern const long off_id = offsetof(Device, id_);
extern const long off_init = offsetof(Device, initialized_);
extern const long off_alloc = offsetof(Device, default_allocator_);
extern const long off_dram = offsetof(AllocatorImpl, dram_manager_);
extern const long off_l1 = offsetof(AllocatorImpl, l1_manager_);
extern const long off_l1s = offsetof(AllocatorImpl, l1_small_manager_);
extern const long off_trace = offsetof(AllocatorImpl, trace_buffer_manager_);
}
`

func TestRootLayoutFromDWARF(t *testing.T) {
	for _, cc := range []string{"g++", "clang++"} {
		t.Run(cc, func(t *testing.T) {
			lib, ls := fixtureLayouts(t, cc, "root.cpp", rootFixtureSrc)
			l, err := ls.Root, ls.RootErr
			if err != nil {
				t.Fatal(err)
			}
			names := []string{"off_dm", "off_devices", "off_id", "off_init", "off_alloc", "off_dram", "off_l1", "off_l1s", "off_trace", SymContexts}
			syms, err := lib.lookup(names)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int64{}
			for _, n := range names[:len(names)-1] {
				if _, ok := syms[n]; !ok {
					t.Fatalf("fixture has no %s", n)
				}
				b, err := lib.Bytes(syms[n].Value, 8)
				if err != nil {
					t.Fatalf("%s: %v", n, err)
				}
				want[n] = int64(binary.LittleEndian.Uint64(b))
			}
			got := map[string]int64{"off_dm": l.DeviceManager, "off_devices": l.Devices, "off_id": l.DeviceID,
				"off_init": l.DeviceInit, "off_alloc": l.DeviceAlloc}
			for n, g := range got {
				if g != want[n] {
					t.Errorf("%s: %d, compiler says %d", n, g, want[n])
				}
			}
			mgr := []int64{want["off_dram"], want["off_l1"], want["off_l1s"], want["off_trace"]}
			if len(l.Managers) != 4 {
				t.Fatalf("managers at %v, want %v", l.Managers, mgr)
			}
			for i := range mgr {
				if l.Managers[i] != mgr[i] {
					t.Errorf("managers at %v, want %v", l.Managers, mgr)
				}
			}
			if l.Allocator != "AllocatorImpl" || l.Contexts != syms[SymContexts].Value || l.Slots != 32 {
				t.Errorf("allocator %q, contexts %#x (%d slots); want AllocatorImpl, %#x (32)", l.Allocator, l.Contexts, l.Slots, syms[SymContexts].Value)
			}
		})
	}
}

func TestRootLayoutRefusals(t *testing.T) {
	// No g_instances: refused before any DWARF is read.
	so := compile(t, "g++", "none.cpp", "namespace tt::tt_metal { int x; }", "libtt_metal.so",
		[]string{"-std=c++17", "-g", "-shared", "-fPIC"})
	lib, err := OpenLibrary(so)
	if err != nil {
		t.Fatal(err)
	}
	defer lib.Close()
	if err := AllocatorLayoutsFromDWARF(lib, elfx.Debug{Roots: []string{}}).RootErr; err == nil || !strings.Contains(err.Error(), "g_instances") {
		t.Errorf("no root symbol: %v", err)
	}
	// The root without DWARF: says so.
	so = compile(t, "g++", "nodwarf.cpp", rootFixtureSrc, "libtt_metal.so",
		[]string{"-std=c++17", "-O2", "-shared", "-fPIC", "-Wno-invalid-offsetof"})
	lib2, err := OpenLibrary(so)
	if err != nil {
		t.Fatal(err)
	}
	defer lib2.Close()
	if err := AllocatorLayoutsFromDWARF(lib2, elfx.Debug{Roots: []string{}}).RootErr; err == nil || !strings.Contains(err.Error(), "DWARF") {
		t.Errorf("no DWARF: %v", err)
	}
}

var testRoot = RootLayout{Contexts: 0x100, Slots: 4, DeviceManager: 16, Devices: 8, DeviceID: 8, DeviceInit: 12, DeviceAlloc: 16,
	Allocator: "AllocatorImpl", Managers: []int64{8, 16, 24, 32}}

// rootMemory: context slot 2 -> DeviceManager at 0x400 whose devices_ holds
// the Devices (id, initialized, allocator) at 0x1000 + i*0x100, each
// allocator at 0x8000 + i*0x100 with managers 0xa000+i*0x10+k (k < 4; the
// last null).
func rootMemory(devs []struct {
	id   int32
	open bool
}) fakeMem {
	le := binary.LittleEndian
	mem := fakeMem{}
	slots := make([]byte, 32)
	le.PutUint64(slots[16:], 0x300)
	mem[0x100] = slots
	ctx := make([]byte, 32)
	le.PutUint64(ctx[16:], 0x400)
	mem[0x300] = ctx
	dm := make([]byte, 32)
	le.PutUint64(dm[8:], 0x500)
	le.PutUint64(dm[16:], 0x500+8*uint64(len(devs)))
	mem[0x400] = dm
	vec := make([]byte, 8*len(devs))
	for i, d := range devs {
		addr := 0x1000 + uint64(i)*0x100
		le.PutUint64(vec[i*8:], addr)
		dev := make([]byte, 32)
		le.PutUint32(dev[8:], uint32(d.id))
		if d.open {
			dev[12] = 1
		}
		al := 0x8000 + uint64(i)*0x100
		le.PutUint64(dev[16:], al)
		mem[addr] = dev
		a := make([]byte, 48)
		for k := range 3 {
			le.PutUint64(a[8+8*k:], 0xa000+uint64(i)*0x10+uint64(k))
		}
		mem[al] = a
	}
	mem[0x500] = vec
	return mem
}

func TestReadDevices(t *testing.T) {
	type dev = struct {
		id   int32
		open bool
	}
	got, err := ReadDevices(rootMemory([]dev{{0, true}, {1, false}, {7, true}}), 0x100, &testRoot)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Chip != 0 || got[1].Chip != 7 || len(got[0].Managers) != 3 || got[1].Managers[2] != 0xa022 {
		t.Fatalf("got %+v", got)
	}
	// A closed Device and a reopened one of the same id: only the open one.
	if got, err := ReadDevices(rootMemory([]dev{{3, false}, {3, true}}), 0x100, &testRoot); err != nil || len(got) != 1 || got[0].Chip != 3 {
		t.Errorf("reopened chip: %+v %v", got, err)
	}
	// Two open devices of one id: not what the walk expects.
	if _, err := ReadDevices(rootMemory([]dev{{3, true}, {3, true}}), 0x100, &testRoot); err == nil {
		t.Error("two open devices with one id accepted")
	}
	// A devices_ vector that is no vector, and unreadable memory.
	m := rootMemory([]dev{{0, true}})
	binary.LittleEndian.PutUint64(m[0x400][16:], 0x4ff)
	if _, err := ReadDevices(m, 0x100, &testRoot); err == nil || !strings.Contains(err.Error(), "devices_") {
		t.Errorf("bad vector: %v", err)
	}
	m = rootMemory([]dev{{0, true}})
	binary.LittleEndian.PutUint64(m[0x400][16:], 0x500+8*(maxRootDevices+1))
	if _, err := ReadDevices(m, 0x100, &testRoot); err == nil {
		t.Error("a vector over the bound accepted")
	}
	m = rootMemory([]dev{{0, true}})
	delete(m, 0x1000)
	if _, err := ReadDevices(m, 0x100, &testRoot); err == nil {
		t.Error("an unreadable Device accepted")
	}
	// AnyContext: slot 2 is set; none in an empty array; an unreadable one fails.
	if ok, err := AnyContext(rootMemory([]dev{{0, true}}), 0x100, 4); !ok || err != nil {
		t.Errorf("AnyContext: %v %v", ok, err)
	}
	if ok, err := AnyContext(fakeMem{0x100: make([]byte, 32)}, 0x100, 4); ok || err != nil {
		t.Errorf("AnyContext of no context: %v %v", ok, err)
	}
	if _, err := AnyContext(fakeMem{}, 0x100, 4); err == nil {
		t.Error("AnyContext of unreadable memory")
	}
	// No context at all: no devices, no error.
	if got, err := ReadDevices(fakeMem{0x100: make([]byte, 32)}, 0x100, &testRoot); err != nil || len(got) != 0 {
		t.Errorf("no context: %+v %v", got, err)
	}
}

func TestTTClassArg(t *testing.T) {
	for in, want := range map[string]string{
		"class std::unique_ptr<tt::tt_metal::AllocatorImpl, std::default_delete<tt::tt_metal::AllocatorImpl> >":    "AllocatorImpl",
		"unique_ptr<tt::tt_metal::v0::BankManager, std::default_delete<tt::tt_metal::v0::BankManager> >":           "BankManager",
		"unique_ptr<tt::tt_metal::allocator::Algorithm, std::default_delete<tt::tt_metal::allocator::Algorithm> >": "",
		"unique_ptr<foo::Bar>": "",
		"vector<int>":          "",
	} {
		if got, _ := ttClassArg(in); got != want {
			t.Errorf("ttClassArg(%q) = %q, want %q", in, got, want)
		}
	}
}
