package ttmetal

import (
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// callersSrc has the probed functions of knownCallers and their callers,
// each caller calling out of line, inlining (-DINLINE: always_inline on the
// probed function, whose exported copy stays) or absent (-DNO_CALLERS).
const callersSrc = `
#include <cstdint>
#include <optional>
struct CoreRangeSet { int n; };
namespace tt::tt_metal {
using DeviceAddr = uint64_t;
enum class BufferType : int { DRAM = 0, L1 = 1 };
#ifdef INLINE
#define PROBED __attribute__((always_inline))
#else
#define PROBED __attribute__((noinline))
#endif
class IDevice { public: virtual ~IDevice() = default; virtual int id() const = 0; };
class Device : public IDevice { public: int id_ = 0; int id() const override; };
int Device::id() const { return id_; }
struct BufferRegion { DeviceAddr offset, size; };
class Buffer;
class GraphTracker {
public:
    void track_allocate(const Buffer* buffer);
    void track_deallocate(Buffer* buffer);
    void track_allocate_cb(const CoreRangeSet& ranges, uint64_t addr, uint64_t size, bool global, const IDevice* device);
    volatile uint64_t seen = 0;
};
GraphTracker tracker;
void GraphTracker::track_allocate(const Buffer* b) { seen = seen + (uintptr_t)b; }
void GraphTracker::track_deallocate(Buffer* b) { seen = seen - (uintptr_t)b; }
PROBED void GraphTracker::track_allocate_cb(const CoreRangeSet& r, uint64_t addr, uint64_t size, bool g, const IDevice* d) {
    seen = seen + r.n + addr + size + g + (uintptr_t)d;
}
class Buffer {
public:
    static Buffer* create(IDevice* device, DeviceAddr address, DeviceAddr size, DeviceAddr page_size, BufferType type);
    Buffer* view(const BufferRegion& region);
    IDevice* device_; DeviceAddr size_, address_, page_size_; BufferType type_;
};
PROBED Buffer* Buffer::create(IDevice* device, DeviceAddr address, DeviceAddr size, DeviceAddr page_size, BufferType type) {
    Buffer* b = new Buffer;
    b->device_ = device; b->address_ = address; b->size_ = size; b->page_size_ = page_size; b->type_ = type;
    tracker.track_allocate(b);
    return b;
}
void release(Buffer* b) { tracker.track_deallocate(b); delete b; }
class BankManager {
public:
    DeviceAddr allocate_buffer(DeviceAddr size, DeviceAddr page_size, bool bottom_up, const CoreRangeSet& grid,
                               std::optional<uint32_t> num_shards);
    volatile DeviceAddr next = 0;
};
PROBED DeviceAddr BankManager::allocate_buffer(DeviceAddr size, DeviceAddr page_size, bool bottom_up, const CoreRangeSet& grid,
                                               std::optional<uint32_t> num_shards) {
    DeviceAddr a = next;
    next = next + size / (num_shards ? *num_shards : 1) + page_size + bottom_up + grid.n;
    return a;
}
class AllocatorImpl {
public:
    DeviceAddr allocate_buffer(Buffer* buffer);
    BankManager dram;
};
namespace detail {
class ProgramImpl {
public:
    void allocate_circular_buffers(const IDevice* device);
    CoreRangeSet ranges{3};
};
}
#ifndef NO_CALLERS
Buffer* Buffer::view(const BufferRegion& r) { return create(device_, address_ + r.offset, r.size, page_size_, type_); }
void detail::ProgramImpl::allocate_circular_buffers(const IDevice* device) {
    tracker.track_allocate_cb(ranges, 4096, 64, false, device);
}
DeviceAddr AllocatorImpl::allocate_buffer(Buffer* b) {
    return dram.allocate_buffer(b->size_, b->page_size_, true, CoreRangeSet{1}, std::nullopt);
}
#endif
}  // namespace tt::tt_metal
`

func buildCallers(t *testing.T, flags ...string) string {
	t.Helper()
	return compile(t, "g++", "callers.cpp", callersSrc, "libtt_metal.so", []string{"-std=c++17", "-O2", "-shared", "-fPIC"}, flags...)
}

// objdumpCalls reports whether function fn of so has a call or jump to a
// symbol starting with callee, as objdump disassembles it.
func objdumpCalls(t *testing.T, so, fn, callee string) bool {
	out, err := exec.Command("objdump", "-d", "--no-show-raw-insn", "--disassemble="+fn, so).Output()
	if err != nil {
		t.Fatal(err)
	}
	return regexp.MustCompile(`(?m)\t(call|jmp)\s+[0-9a-f]+ <` + regexp.QuoteMeta(callee)).Match(out)
}

// The plan says a known caller inlined a probed function exactly when
// objdump finds no call from it, and says "no caller in this library"
// (never "inlined") when nothing calls it.
func TestKnownCallersInlinedOrAbsent(t *testing.T) {
	for _, c := range []struct {
		name  string
		flags []string
	}{
		{"calls", nil},
		{"inlined", []string{"-DINLINE", "-fno-semantic-interposition"}},
		{"no_callers", []string{"-DNO_CALLERS"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			so := buildCallers(t, c.flags...)
			lib, syms := openResolved(t, so)
			p, err := ChoosePlan(lib, syms, LayoutV1, Options{Mode: ProbesTracker})
			if err != nil {
				t.Fatal(err)
			}
			said := strings.Join(append(append([]string(nil), p.Caveats...), p.Notes...), "\n")
			inlined := map[Program]bool{}
			for _, pt := range p.Points {
				if pt.Status == "inlined" {
					inlined[pt.Program] = true
				}
			}
			// The view's create, track_allocate_cb, BankManager::allocate_buffer
			// from AllocatorImpl.
			for _, k := range []knownCaller{knownCallers[0], knownCallers[1], knownCallers[3]} {
				hasCaller := c.name != "no_callers"
				calls := hasCaller && objdumpCalls(t, so, k.caller, strings.TrimSuffix(k.callee, "*"))
				if want := hasCaller && !calls; inlined[k.program] != want {
					t.Errorf("%s reported inlined: %v; objdump: %s present %v, calls it %v", k.program, inlined[k.program], k.callerName, hasCaller, calls)
				}
				if hasCaller && !calls && !strings.Contains(said, k.calleeName+" is inlined into "+k.callerName) {
					t.Errorf("plan does not say %s is inlined into %s:\n%s", k.calleeName, k.callerName, said)
				}
			}
			// Views count nothing: an inlined view create leaves the plan exact;
			// circular buffers do count.
			noCB := strings.Contains(said, "GraphTracker::track_allocate_cb has no caller in this library: circular buffers are not seen")
			if noCB != (c.name == "no_callers") || strings.Contains(said, "(inlined)") {
				t.Errorf("no-caller wording: %v, want %v:\n%s", noCB, c.name == "no_callers", said)
			}
			if p.Exact != (c.name == "calls") {
				t.Errorf("exact %v:\n%s", p.Exact, said)
			}
			noAlloc := strings.Contains(said, "BankManager::allocate_buffer has no caller in this library: "+bankAllocateNoCaller)
			if noAlloc != (c.name == "no_callers") {
				t.Errorf("allocate_buffer no-caller caveat: %v, want %v:\n%s", noAlloc, c.name == "no_callers", said)
			}
			if c.name == "inlined" && !strings.Contains(said, "totals unaffected") {
				t.Errorf("an inlined view create without saying totals are unaffected:\n%s", said)
			}
		})
	}
}

// Options.NoAllocator (the bench's --no-allocator-probes) leaves every
// allocator program out of the attach points, and only those.
func TestPlanNoAllocator(t *testing.T) {
	so := buildCallers(t)
	lib, syms := openResolved(t, so)
	count := func(noAlloc bool) (alloc, other int) {
		p, err := ChoosePlan(lib, syms, LayoutV1, Options{Mode: ProbesTracker, NoAllocator: noAlloc})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range p.AttachPoints {
			if allocatorPrograms[s.Program] {
				alloc++
			} else {
				other++
			}
		}
		return alloc, other
	}
	a, o := count(false)
	if a == 0 {
		t.Fatal("the test library's plan has no allocator probe: the test proves nothing")
	}
	a2, o2 := count(true)
	if a2 != 0 || o2 != o {
		t.Errorf("NoAllocator: %d allocator and %d other points, want 0 and %d", a2, o2, o)
	}
}

// TestPlanResidencyNote: a plan that sees CBs but cannot know what each
// core holds (no dispatch probe, no CoreRangeSet offsets) says so in a
// note naming why, and leaves the plan exact.
func TestPlanResidencyNote(t *testing.T) {
	so := buildCallers(t)
	lib, syms := openResolved(t, so)
	note := func(layout Layout) string {
		p, err := ChoosePlan(lib, syms, layout, Options{Mode: ProbesTracker})
		if err != nil {
			t.Fatal(err)
		}
		cb := false
		for _, pt := range p.Points {
			cb = cb || pt.Program == ProgTrackAllocateCB && pt.Status == StatusAttached
		}
		if !cb {
			t.Fatal("the test library's plan does not probe track_allocate_cb: the test proves nothing")
		}
		for _, n := range p.Notes {
			if strings.Contains(n, "resident per core unknown") {
				return n
			}
		}
		return ""
	}
	noRanges := LayoutV1
	noRanges.CoreRanges = -1
	got := note(noRanges)
	if !strings.Contains(got, "no CoreRangeSet offsets") || !strings.Contains(got, "cb_registered_bytes is whole") {
		t.Errorf("layout without CoreRangeSet: note %q", got)
	}
	if LayoutV1.CoreRanges < 0 {
		t.Fatal("LayoutV1 has no CoreRangeSet offsets")
	}
	if got := note(LayoutV1); strings.Contains(got, "CoreRangeSet") {
		t.Errorf("LayoutV1 gives the offsets, yet the note says %q", got)
	}
}
