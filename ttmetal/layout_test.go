package ttmetal

import (
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tttrace/tttrace/elfx"
)

// fixtureSrc is a small stand-in for libtt_metal.so: the symbols tttrace
// needs (GraphTracker, the Device vtable), Buffer with out-of-line
// accessors, and Buffer's lifecycle, in four member layouts (-DLAYOUT_V1,
// -DLAYOUT_V0 (with -Dtt_metal=tt_metal::v0), -DLAYOUT_V2 (pimpl),
// -DLAYOUT_SHUFFLED). The static_asserts make the compiler check the
// offsets the tests expect. -DTRACKER_INLINED inlines the tracker into
// Buffer as LTO can. -DPIMPL2 (with -DLAYOUT_V2) moves allocate_impl and
// deallocate_impl into BufferImpl, taking the Buffer&, as the 2026 pimpl-2
// design does. -DTYPE_U8 makes BufferType one byte (enum class
// BufferType : uint8_t, as upstream's allocator header declares it) and
// -DTYPE_PREDICATES adds upstream's out-of-line Buffer::is_trace(),
// is_dram() and is_l1() const. -DCORE_RANGES adds CoreRangeSet (global, as
// the CB probe's mangled name has it) and GraphTracker::track_allocate_cb;
// with it -DCORE_RANGES_MUTEX puts a std::mutex before ranges_ (late 2024),
// -DCORE_RANGES_NS moves the classes into tt::tt_metal (2026),
// -DCORE_COORD_U32 makes x and y 4 bytes, -DCORE_COORD_MIXED x 4 bytes and
// y 8.
const fixtureSrc = `
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <atomic>

#ifdef CORE_RANGES
#include <mutex>
#include <vector>
struct xy_pair {
#if defined(CORE_COORD_U32)
    uint32_t x; uint32_t y;
#elif defined(CORE_COORD_MIXED)
    uint32_t x; std::size_t y;
#else
    std::size_t x; std::size_t y;
#endif
};
using tt_xy_pair = xy_pair;
#ifdef CORE_RANGES_NS
namespace tt::tt_metal {
#endif
using CoreCoord = tt_xy_pair;
// Constructors out of line, as upstream's core_coord.cpp has them (clang
// emits a class's definition where its constructor is).
class CoreRange {
public:
    CoreCoord start_coord;
    CoreCoord end_coord;
    CoreRange(const CoreCoord& start, const CoreCoord& end);
};
class CoreRangeSet {
public:
    CoreRangeSet(const CoreRange& range);
    const std::vector<CoreRange>& ranges() const;
private:
#ifdef CORE_RANGES_MUTEX
    std::mutex lock_;
#endif
    std::vector<CoreRange> ranges_;
};
CoreRange::CoreRange(const CoreCoord& start, const CoreCoord& end) : start_coord(start), end_coord(end) {}
CoreRangeSet::CoreRangeSet(const CoreRange& range) : ranges_{range} {}
const std::vector<CoreRange>& CoreRangeSet::ranges() const { return ranges_; }
#ifdef CORE_RANGES_NS
}  // namespace tt::tt_metal
#endif
#endif

namespace tt::tt_metal {
#ifdef TYPE_U8
enum class BufferType : uint8_t { DRAM = 0, L1 = 1, SYSTEM_MEMORY = 2, L1_SMALL = 3, TRACE = 4 };
#else
enum class BufferType : int { DRAM = 0, L1 = 1, SYSTEM_MEMORY = 2, L1_SMALL = 3, TRACE = 4 };
#endif
#ifdef LAYOUT_V0
enum class AllocationStatus : uint8_t { ALLOCATION_REQUESTED = 0, ALLOCATION_FAILED = 1, ALLOCATED = 2, DEALLOCATED = 3 };
#else
enum class AllocationStatus : uint8_t { ALLOCATION_REQUESTED = 0, ALLOCATED = 1, DEALLOCATED = 2 };
#endif

class IDevice {
public:
    virtual ~IDevice();
    virtual int arch() const;
    virtual int id() const = 0;
};
class Device : public IDevice {
public:
    explicit Device(int id) : id_(id) {}
    int id() const override;
    int id_;
};

class Buffer;
class GraphTracker {
public:
    void track_allocate(const Buffer* buffer);
    void track_deallocate(Buffer* buffer);
#ifdef CORE_RANGES
    void track_allocate_cb(const CoreRangeSet& core_range_set, uint64_t addr, uint64_t size,
                           bool is_globally_allocated, const IDevice* device);
#endif
    const void* last = nullptr;
};

struct BufferImpl {
#ifdef PIMPL2
    void allocate_impl(Buffer& self);
    void deallocate_impl(Buffer& self);
#endif
    IDevice* device_; uint64_t size_; BufferType buffer_type_; int layout_; bool bottom_up_;
    std::optional<uint8_t> sub_device_id_; bool owns_data_; std::optional<uint64_t> sdm_; void* allocator_;
    AllocationStatus allocation_status_; bool hooked_allocation_; uint64_t address_; uint64_t page_size_;
};

class Buffer final
#ifndef LAYOUT_V0
    : public std::enable_shared_from_this<Buffer>
#endif
{
public:
    uint64_t address() const;
    bool is_allocated() const;
    uint64_t page_size() const;
#ifdef TYPE_PREDICATES
    bool is_trace() const;
    bool is_dram() const;
    bool is_l1() const;
#endif
#ifdef LAYOUT_V2
    uint64_t size() const;
    IDevice* device() const;
#endif
    void allocate_impl();
    void deallocate_impl();
    static void checks();
#if defined(LAYOUT_V2)
    std::unique_ptr<BufferImpl> impl_;
#elif defined(LAYOUT_SHUFFLED)
    uint64_t address_; uint64_t page_size_; AllocationStatus allocation_status_; bool hooked_allocation_;
    bool owns_data_; BufferType buffer_type_; IDevice* device_; uint64_t size_;
#else
    IDevice* device_; uint64_t size_; BufferType buffer_type_; int layout_; bool bottom_up_;
    std::optional<uint8_t> sub_device_id_; bool owns_data_; std::optional<uint64_t> sdm_; void* allocator_;
#ifdef LAYOUT_V0
    std::atomic<AllocationStatus> allocation_status_;
#else
    AllocationStatus allocation_status_;
#endif
    bool hooked_allocation_; uint64_t address_; uint64_t page_size_;
#endif
};

#ifdef LAYOUT_V2
#define F(x) impl_->x
#else
#define F(x) x
#endif

void Buffer::checks() {
#if defined(LAYOUT_V2)
    static_assert(offsetof(Buffer, impl_) == 16 && offsetof(BufferImpl, address_) == 64 &&
                  offsetof(BufferImpl, allocation_status_) == 56 && offsetof(BufferImpl, size_) == 8);
#elif defined(LAYOUT_SHUFFLED)
    static_assert(offsetof(Buffer, address_) == 16 && offsetof(Buffer, page_size_) == 24 &&
                  offsetof(Buffer, allocation_status_) == 32 && offsetof(Buffer, hooked_allocation_) == 33 &&
                  offsetof(Buffer, owns_data_) == 34 && offsetof(Buffer, buffer_type_) == 36 &&
                  offsetof(Buffer, device_) == 40 && offsetof(Buffer, size_) == 48);
#elif defined(LAYOUT_V0)
    static_assert(offsetof(Buffer, device_) == 0 && offsetof(Buffer, owns_data_) == 27 &&
                  offsetof(Buffer, allocation_status_) == 56 && offsetof(Buffer, address_) == 64 &&
                  offsetof(Buffer, page_size_) == 72);
#else
    static_assert(offsetof(Buffer, device_) == 16 && offsetof(Buffer, owns_data_) == 43 &&
                  offsetof(Buffer, allocation_status_) == 72 && offsetof(Buffer, address_) == 80 &&
                  offsetof(Buffer, page_size_) == 88);
#endif
    static_assert(offsetof(Device, id_) == 8);
}

IDevice::~IDevice() {}
int IDevice::arch() const { return 2; }
int Device::id() const { return id_; }
Device* make_device(int id) { return new Device(id); }

GraphTracker tracker;
void GraphTracker::track_allocate(const Buffer* buffer) { if (buffer) last = buffer; }
void GraphTracker::track_deallocate(Buffer* buffer) { if (buffer) last = buffer; }
#ifdef CORE_RANGES
void GraphTracker::track_allocate_cb(const CoreRangeSet& core_range_set, uint64_t, uint64_t, bool, const IDevice*) {
    last = core_range_set.ranges().data();
}
#endif

uint64_t Buffer::address() const { return F(address_); }
bool Buffer::is_allocated() const { return F(allocation_status_) == AllocationStatus::ALLOCATED; }
uint64_t Buffer::page_size() const { return F(page_size_); }
#ifdef TYPE_PREDICATES
bool Buffer::is_trace() const { return F(buffer_type_) == BufferType::TRACE; }
bool Buffer::is_dram() const { return F(buffer_type_) == BufferType::DRAM || F(buffer_type_) == BufferType::TRACE; }
bool Buffer::is_l1() const { return F(buffer_type_) == BufferType::L1 || F(buffer_type_) == BufferType::L1_SMALL; }
#endif
#ifdef LAYOUT_V2
uint64_t Buffer::size() const { return impl_->size_; }
IDevice* Buffer::device() const { return impl_->device_; }
#endif

#ifdef PIMPL2
__attribute__((noinline)) void BufferImpl::allocate_impl(Buffer& self) {
    address_ = 4096;
    allocation_status_ = AllocationStatus::ALLOCATED;
#ifdef TRACKER_INLINED
    tracker.last = &self;
#else
    tracker.track_allocate(&self);
#endif
}
__attribute__((noinline)) void BufferImpl::deallocate_impl(Buffer& self) {
    if (allocation_status_ != AllocationStatus::ALLOCATED) return;
#ifdef TRACKER_INLINED
    tracker.last = &self;
#else
    tracker.track_deallocate(&self);
#endif
    allocation_status_ = AllocationStatus::DEALLOCATED;
}
#else
__attribute__((noinline)) void Buffer::allocate_impl() {
    F(address_) = 4096;
    F(allocation_status_) = AllocationStatus::ALLOCATED;
#ifdef TRACKER_INLINED
    tracker.last = this;
#else
    tracker.track_allocate(this);
#endif
}
__attribute__((noinline)) void Buffer::deallocate_impl() {
    if (F(allocation_status_) != AllocationStatus::ALLOCATED) return;
#ifdef TRACKER_INLINED
    tracker.last = this;
#else
    tracker.track_deallocate(this);
#endif
    F(allocation_status_) = AllocationStatus::DEALLOCATED;
}
#endif
}  // namespace tt::tt_metal
`

// buildFixture compiles fixtureSrc with the given flags into a library in
// a temporary directory.
func buildFixture(t *testing.T, flags ...string) string {
	t.Helper()
	return compile(t, "g++", "fixture.cpp", fixtureSrc, "libtt_metal.so",
		[]string{"-std=c++17", "-O2", "-shared", "-fPIC", "-fvisibility-inlines-hidden", "-Wl,--build-id"}, flags...)
}

// resolveLayoutOf resolves the layout of the library so with a layout file
// and separate debug files looked for under roots only (none: the host's
// /usr/lib/debug stays out of the test).
func resolveLayoutOf(t *testing.T, so, layoutFile string, roots ...string) (*LayoutSource, error) {
	t.Helper()
	lib, err := OpenLibrary(so)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lib.Close() })
	syms, err := ResolveSymbols(lib)
	if err != nil {
		t.Fatal(err)
	}
	if err := syms.Check(lib); err != nil {
		t.Fatalf("fixture fails Check: %v", err)
	}
	return ResolveLayout(lib, syms, Options{LayoutFile: layoutFile, Debug: elfx.Debug{Roots: append([]string{}, roots...)}})
}

func checkOffsets(t *testing.T, got Layout, want map[string]int64) {
	t.Helper()
	for name, w := range want {
		f := fieldByJSON(name)
		var g int64
		switch {
		case f != nil:
			g = *f.get(&got)
		case name == "buffer_impl_ptr":
			g = got.BufferImplPtr
		case name == "allocated_value":
			g = got.Allocated
		default:
			t.Fatalf("no field %s", name)
		}
		if g != w {
			t.Errorf("%s = %d, want %d (layout %+v)", name, g, w, got)
		}
	}
}

func TestLayoutProfileConfirmedByCode(t *testing.T) {
	src, err := resolveLayoutOf(t, buildFixture(t, "-DLAYOUT_V1"), "")
	if err != nil {
		t.Fatal(err)
	}
	if src.Layout.Name != "V1" || !strings.Contains(src.From, "profile V1") || !strings.Contains(src.From, "confirmed by the code of 4 accessors") {
		t.Errorf("from %q (layout %s)", src.From, src.Layout.Name)
	}
	got := map[string]Evidence{}
	for _, e := range src.Evidence {
		got[e.Field] = e
	}
	for field, off := range map[string]int64{"address": 80, "page_size": 88, "allocation_status": 72, "device_id": 8} {
		if e, ok := got[field]; !ok || e.Offset != off || e.ImplPtr != -1 {
			t.Errorf("evidence for %s: %+v, want offset %d", field, e, off)
		}
	}
	if e := got["allocation_status"]; e.Allocated != 1 {
		t.Errorf("ALLOCATED from is_allocated(): %d, want 1", e.Allocated)
	}
}

// A build without DWARF whose buffer_type() is inline: buffer_type_'s
// width is read off the out-of-line is_trace(), is_dram() and is_l1()
// (cmp BYTE PTR vs cmp DWORD PTR, for gcc and clang), corrects the
// profile's int width where BufferType is one byte, and doctor's field
// checks say it is verified and by what. Without the predicates the width
// is the profile's default, said to be unverified.
func TestTypeWidthFromPredicates(t *testing.T) {
	for _, cc := range []string{"g++", "clang++"} {
		for _, c := range []struct {
			flags    []string
			width    int64
			verified bool
		}{
			{[]string{"-DTYPE_U8", "-DTYPE_PREDICATES"}, 1, true},
			{[]string{"-DTYPE_PREDICATES"}, 4, true},
			{[]string{"-DTYPE_U8"}, 4, false},
		} {
			name := cc + strings.Join(c.flags, "")
			so := compile(t, cc, "fixture.cpp", fixtureSrc, "libtt_metal.so",
				append([]string{"-std=c++17", "-O2", "-shared", "-fPIC", "-fvisibility-inlines-hidden", "-Wl,--build-id", "-DLAYOUT_V1"}, c.flags...))
			src, err := resolveLayoutOf(t, so, "")
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if src.Layout.Name != "V1" || src.Layout.Type != 32 || src.Layout.TypeWidth != c.width {
				t.Errorf("%s: layout %s, buffer_type_ at %d, %d byte(s); want V1, 32, %d", name, src.Layout.Name,
					src.Layout.Type, src.Layout.TypeWidth, c.width)
			}
			preds := 0
			for _, e := range src.Evidence {
				if e.Field == "buffer_type" {
					preds++
					if e.Offset != 32 || e.Width != c.width || e.ImplPtr != -1 {
						t.Errorf("%s: evidence %+v", name, e)
					}
				}
			}
			if want := map[bool]int{true: 3}[slices.Contains(c.flags, "-DTYPE_PREDICATES")]; preds != want {
				t.Errorf("%s: %d pieces of evidence for buffer_type_, want %d: %+v", name, preds, want, src.Evidence)
			}
			corrected := len(src.Corrections) > 0
			if corrected != (c.width == 1) {
				t.Errorf("%s: corrections %q", name, src.Corrections)
			}
			var w *FieldCheck
			for i := range src.Fields {
				if src.Fields[i].Field == "buffer_type_width" {
					w = &src.Fields[i]
				}
			}
			if w == nil || w.Value != c.width || w.Verified != c.verified ||
				c.verified != strings.Contains(w.How, "Buffer::is_trace() const") {
				t.Errorf("%s: width check %+v, want %d verified %v by is_trace()", name, w, c.width, c.verified)
			}
		}
	}
}

// Two accessors that read one field at different widths: the layout is
// not trusted.
func TestConflictingWidthsDisagree(t *testing.T) {
	l := LayoutV1
	ev := []Evidence{
		{Field: "buffer_type", Offset: 32, ImplPtr: -1, Width: 1, Source: "a"},
		{Field: "buffer_type", Offset: 32, ImplPtr: -1, Width: 4, Source: "b"},
	}
	diffs, _ := disagreements(&l, ev, true)
	if len(diffs) != 1 || !strings.Contains(diffs[0], "at 1 byte(s) (a) and at 4 (b)") {
		t.Errorf("diffs %q", diffs)
	}
}

func TestLayoutV0ProfileFillsFromCode(t *testing.T) {
	src, err := resolveLayoutOf(t, buildFixture(t, "-DLAYOUT_V0", "-Dtt_metal=tt_metal::v0"), "")
	if err != nil {
		t.Fatal(err)
	}
	if src.Layout.Name != "V0" {
		t.Fatalf("layout %s from %s", src.Layout.Name, src.From)
	}
	// page_size_ is not in the V0 facts: it comes from page_size()'s code;
	// hooked_allocation_ stays unknown and is reported so.
	checkOffsets(t, src.Layout, map[string]int64{"device": 0, "address": 64, "allocation_status": 56,
		"page_size": 72, "hooked_allocation": -1, "allocated_value": 2})
	if !strings.Contains(strings.Join(src.Unknown, " "), "hooked_allocation_") {
		t.Errorf("unknown fields not reported: %v", src.Unknown)
	}
}

func TestLayoutV2ProfileThroughImpl(t *testing.T) {
	src, err := resolveLayoutOf(t, buildFixture(t, "-DLAYOUT_V2"), "")
	if err != nil {
		t.Fatal(err)
	}
	checkOffsets(t, src.Layout, map[string]int64{"buffer_impl_ptr": 16, "size": 8, "address": 64, "allocation_status": 56, "page_size": 72})
	n := 0
	for _, e := range src.Evidence {
		if e.ImplPtr == 16 {
			n++
		}
	}
	if n < 5 { // address, page_size, is_allocated, size, device
		t.Errorf("%d accessors read through the BufferImpl pointer, want 5: %+v", n, src.Evidence)
	}
}

func TestLayoutUnknownRefusedNamingChecks(t *testing.T) {
	_, err := resolveLayoutOf(t, buildFixture(t, "-DLAYOUT_SHUFFLED"), "")
	var le *LayoutError
	if !errors.As(err, &le) {
		t.Fatalf("shuffled layout without DWARF: %v, want a LayoutError", err)
	}
	for _, want := range []string{"--layout: not given", "no .debug_info", "Buffer::address() const", "address_ is at 16",
		"the layout says 80", "profile V0 needs", "profile V2 needs", "profile V1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal lacks %q: %v", want, err)
		}
	}
}

var shuffled = map[string]int64{"address": 16, "page_size": 24, "allocation_status": 32, "hooked_allocation": 33,
	"owns_data": 34, "buffer_type": 36, "device": 40, "size": 48, "device_id": 8, "allocated_value": 1, "buffer_impl_ptr": -1}

func TestLayoutFromDWARF(t *testing.T) {
	for _, compress := range []string{"", "zlib", "zstd"} {
		t.Run("compress="+compress, func(t *testing.T) {
			so := buildFixture(t, "-DLAYOUT_SHUFFLED", "-g")
			if compress != "" {
				if out, err := exec.Command("objcopy", "--compress-debug-sections="+compress, so).CombinedOutput(); err != nil {
					t.Skipf("objcopy cannot compress with %s: %v %s", compress, err, out)
				}
			}
			src, err := resolveLayoutOf(t, so, "")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(src.From, "DWARF of "+so) {
				t.Errorf("from %q", src.From)
			}
			checkOffsets(t, src.Layout, shuffled)
		})
	}
	t.Run("pimpl", func(t *testing.T) {
		src, err := resolveLayoutOf(t, buildFixture(t, "-DLAYOUT_V2", "-g"), "")
		if err != nil {
			t.Fatal(err)
		}
		checkOffsets(t, src.Layout, map[string]int64{"buffer_impl_ptr": 16, "device": 0, "size": 8, "owns_data": 27,
			"allocation_status": 56, "hooked_allocation": 57, "address": 64, "page_size": 72})
	})
	t.Run("v0", func(t *testing.T) {
		src, err := resolveLayoutOf(t, buildFixture(t, "-DLAYOUT_V0", "-Dtt_metal=tt_metal::v0", "-g"), "")
		if err != nil {
			t.Fatal(err)
		}
		checkOffsets(t, src.Layout, map[string]int64{"device": 0, "hooked_allocation": 57, "allocation_status": 56, "allocated_value": 2})
	})
}

// The CB probe's CoreRangeSet rows from DWARF, read where the library has
// track_allocate_cb and checked: every row or none, and a CoreCoord whose x
// and y differ in width leaves them unknown with the reason (never half a
// layout). gcc and clang; the CoreRangeSet of late 2024 (a mutex before
// ranges_), of 2026 (in tt::tt_metal, read when wanted: that build's
// track_allocate_cb has another mangled name), 4-byte coordinates.
func TestCoreRangesFromDWARF(t *testing.T) {
	const known = "CoreRangeSet read"
	v1 := map[string]int64{"core_ranges": 0, "core_range_size": 32, "core_range_start": 0, "core_range_end": 16,
		"core_coord_x": 0, "core_coord_y": 8, "core_coord_width": 8}
	unknown := map[string]int64{"core_ranges": -1, "core_range_size": -1, "core_range_start": -1, "core_range_end": -1,
		"core_coord_x": -1, "core_coord_y": -1, "core_coord_width": -1}
	with := func(m map[string]int64, kv ...any) map[string]int64 {
		out := maps.Clone(m)
		for i := 0; i < len(kv); i += 2 {
			out[kv[i].(string)] = int64(kv[i+1].(int))
		}
		return out
	}
	for _, cc := range []string{"g++", "clang++"} {
		for _, c := range []struct {
			flags []string
			want  map[string]int64
			said  string
		}{
			{nil, v1, known},
			{[]string{"-DCORE_RANGES_MUTEX"}, with(v1, "core_ranges", 40), known},
			{[]string{"-DCORE_COORD_U32"}, with(v1, "core_range_size", 16, "core_range_end", 8, "core_coord_y", 4, "core_coord_width", 4), known},
			{[]string{"-DCORE_COORD_MIXED"}, unknown, "CoreRange::start_coord: x and y are not integers of one width (4 and 8 bytes): circular buffers carry no core ranges"},
		} {
			name := cc + strings.Join(c.flags, "")
			so := compile(t, cc, "fixture.cpp", fixtureSrc, "libtt_metal.so",
				append([]string{"-std=c++17", "-O2", "-g", "-shared", "-fPIC", "-fvisibility-inlines-hidden", "-Wl,--build-id",
					"-DLAYOUT_SHUFFLED", "-DCORE_RANGES"}, c.flags...))
			src, err := resolveLayoutOf(t, so, "")
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			checkOffsets(t, src.Layout, c.want)
			if checked := strings.Join(src.Checked, ". "); !strings.Contains(checked, c.said) {
				t.Errorf("%s: checked %q, want %q", name, checked, c.said)
			}
			lacks := strings.Contains(strings.Join(src.Unknown, " "), "CoreRangeSet / CoreRange / CoreCoord: circular buffers carry no core ranges")
			if lacks != (c.want["core_ranges"] < 0) {
				t.Errorf("%s: unknown %q", name, src.Unknown)
			}
		}
		// 2026: the classes in tt::tt_metal.
		so := compile(t, cc, "fixture.cpp", fixtureSrc, "libtt_metal.so",
			[]string{"-std=c++17", "-O2", "-g", "-shared", "-fPIC", "-DLAYOUT_SHUFFLED", "-DCORE_RANGES", "-DCORE_RANGES_NS"})
		l, where, err := dwarfLayout(so, dwarfWants{coreRanges: true})
		if err != nil {
			t.Fatal(err)
		}
		checkOffsets(t, *l, v1)
		if !strings.Contains(where, "tt::tt_metal::CoreRangeSet read") {
			t.Errorf("%s in tt::tt_metal: %q", cc, where)
		}
	}
	// Not wanted (no track_allocate_cb): not read.
	src, err := resolveLayoutOf(t, buildFixture(t, "-DLAYOUT_SHUFFLED", "-g"), "")
	if err != nil {
		t.Fatal(err)
	}
	checkOffsets(t, src.Layout, unknown)
	if checked := strings.Join(src.Checked, ". "); strings.Contains(checked, "CoreRangeSet") {
		t.Errorf("CoreRangeSet looked for in a library without the CB probe: %q", checked)
	}
}

// A layout file's CoreRangeSet rows: all of them or none, and what BPF can
// copy (a CoreRange of at most 64 bytes, coordinates of 4 or 8 bytes inside
// it).
func TestLayoutFileCoreRanges(t *testing.T) {
	for _, c := range []struct {
		set  map[string]int64
		fail string
	}{
		{map[string]int64{}, ""},
		{map[string]int64{"core_ranges": -1}, ""}, // one unknown: none read
		{map[string]int64{"core_coord_width": 2}, "core_coord_width 2: must be 4 or 8"},
		{map[string]int64{"core_range_size": 96}, "core_range_size 96: must be 1 to 64"},
		{map[string]int64{"core_range_end": 24}, "past core_range_size 32"},
		{map[string]int64{"core_coord_y": 12, "core_coord_width": 4}, ""},
		{map[string]int64{"core_coord_y": 12}, "past core_range_size 32"},
	} {
		l := LayoutV1
		for k, v := range c.set {
			*fieldByJSON(k).get(&l) = v
		}
		b, _ := json.Marshal(l)
		f := filepath.Join(t.TempDir(), "l.json")
		os.WriteFile(f, b, 0o644)
		_, err := ReadLayoutFile(f)
		if c.fail == "" && err != nil || c.fail != "" && (err == nil || !strings.Contains(err.Error(), c.fail)) {
			t.Errorf("%v: %v, want %q", c.set, err, c.fail)
		}
	}
}

// A separate debug file is used only when it belongs to this build.
func TestLayoutFromDebugFileByBuildID(t *testing.T) {
	so := buildFixture(t, "-DLAYOUT_SHUFFLED", "-g")
	other := buildFixture(t, "-DLAYOUT_SHUFFLED", "-g", "-DOTHER_BUILD=1", "-O1")
	lib, err := OpenLibrary(so)
	if err != nil {
		t.Fatal(err)
	}
	id := lib.BuildID
	lib.Close()
	if id == "" {
		t.Fatal("fixture has no build-id")
	}
	root := t.TempDir()
	dbg := filepath.Join(root, ".build-id", id[:2], id[2:]+".debug")
	os.MkdirAll(filepath.Dir(dbg), 0o755)
	run := func(args ...string) {
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	run("objcopy", "--only-keep-debug", "--compress-debug-sections=zlib", so, dbg)
	run("objcopy", "--strip-debug", so)

	src, err := resolveLayoutOf(t, so, "", root)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(src.From, "DWARF of "+dbg) {
		t.Errorf("from %q, want the debug file %s", src.From, dbg)
	}
	checkOffsets(t, src.Layout, shuffled)

	// Another build's debug file at that path: refused, and with no other
	// source the layout is unknown.
	run("objcopy", "--only-keep-debug", other, dbg)
	_, err = resolveLayoutOf(t, so, "", root)
	if err == nil || !strings.Contains(err.Error(), "another build, not used") {
		t.Errorf("a foreign debug file: %v", err)
	}
}

func TestLayoutFileWinsButDisagreementIsReported(t *testing.T) {
	so := buildFixture(t, "-DLAYOUT_V1")
	f := filepath.Join(t.TempDir(), "l.json")
	os.WriteFile(f, []byte(`{"buffer_impl_ptr":-1,"device":16,"size":24,"buffer_type":32,"owns_data":43,`+
		`"allocation_status":72,"hooked_allocation":73,"address":88,"page_size":80,"device_id":8}`), 0o644)
	src, err := resolveLayoutOf(t, so, f)
	if err != nil {
		t.Fatal(err)
	}
	if src.From != "file "+f || src.Layout.Address != 88 {
		t.Errorf("the file was not used as given: %+v from %s", src.Layout, src.From)
	}
	if src.Layout.Allocated != 1 {
		t.Errorf("allocated_value not taken from is_allocated(): %d", src.Layout.Allocated)
	}
	w := strings.Join(src.Warnings, "\n")
	if !strings.Contains(w, "address_ is at 80, the layout says 88") || !strings.Contains(w, "page_size_ is at 88") {
		t.Errorf("disagreement not reported: %q", w)
	}
	os.WriteFile(f, []byte(`{"device":16,"size":24,"address":80}`), 0o644)
	if _, err := resolveLayoutOf(t, so, f); err == nil || !strings.Contains(err.Error(), "buffer_impl_ptr") {
		t.Errorf("an incomplete layout file: %v", err)
	}
	os.WriteFile(f, []byte(`{"buffer_impl_ptr":-1,"device":16,"size":24,"buffer_type":32,"owns_data":43,`+
		`"allocation_status":72,"hooked_allocation":73,"address":80,"page_size":88,"device_id":8,"adress":1}`), 0o644)
	if _, err := resolveLayoutOf(t, so, f); err == nil || !strings.Contains(err.Error(), "adress") {
		t.Errorf("a misspelt key: %v", err)
	}
}

// DWARF and the library's code must agree; a debug file of the same build
// cannot disagree, so the comparison itself is checked.
func TestDisagreementsAreErrors(t *testing.T) {
	l := LayoutV1
	ev := []Evidence{{Field: "address", Offset: 80, ImplPtr: -1, Allocated: -1, Source: "a"},
		{Field: "allocation_status", Offset: 72, ImplPtr: -1, Allocated: 2, Source: "b"},
		{Field: "size", Offset: 8, ImplPtr: 16, Allocated: -1, Source: "c"}}
	diffs, _ := disagreements(&l, ev, false)
	if len(diffs) != 2 || !strings.Contains(diffs[0], "ALLOCATED is 2") || !strings.Contains(diffs[1], "BufferImpl pointer at 16") {
		t.Errorf("diffs %q", diffs)
	}
	l = LayoutV0
	diffs, filled := disagreements(&l, []Evidence{{Field: "page_size", Offset: 72, ImplPtr: -1, Allocated: -1, Source: "p"}}, true)
	if len(diffs) != 0 || len(filled) != 1 || l.PageSize != 72 {
		t.Errorf("fill: %v %v %+v", diffs, filled, l)
	}
}

// The 2026 pimpl-2 design: with the tracker called, the tracker plan,
// with a note; where the lifecycle plan would be needed (tracker inlined,
// or asked for), a refusal that names BufferImpl's functions.
func TestPimpl2Plans(t *testing.T) {
	for _, c := range []struct {
		flags []string
		mode  ProbeMode
		err   bool
	}{
		{[]string{"-DLAYOUT_V2", "-DPIMPL2"}, ProbesAuto, false},
		{[]string{"-DLAYOUT_V2", "-DPIMPL2"}, ProbesLifecycle, true},
		{[]string{"-DLAYOUT_V2", "-DPIMPL2", "-DTRACKER_INLINED"}, ProbesAuto, true},
	} {
		lib, syms := openResolved(t, buildFixture(t, c.flags...))
		src, err := ResolveLayout(lib, syms, Options{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := ChoosePlan(lib, syms, src.Layout, Options{Mode: c.mode})
		switch {
		case c.err && (err == nil || !strings.Contains(err.Error(), "BufferImpl::allocate_impl(Buffer&)") ||
			!strings.Contains(err.Error(), "--probes tracker")):
			t.Errorf("%v %s: %v; want a refusal naming BufferImpl::allocate_impl(Buffer&)", c.flags, c.mode, err)
		case !c.err && err != nil:
			t.Errorf("%v %s: %v", c.flags, c.mode, err)
		case !c.err && (p.Kind != PlanTracker || !strings.Contains(strings.Join(p.Notes, " "), "2026 pimpl design")):
			t.Errorf("%v %s: plan %s, notes %q", c.flags, c.mode, p.Kind, p.Notes)
		}
	}
}

func TestChoosePlanFromCallSites(t *testing.T) {
	for _, c := range []struct {
		flags []string
		kind  PlanKind
	}{
		{[]string{"-DLAYOUT_V1"}, "tracker"},
		{[]string{"-DLAYOUT_V1", "-DTRACKER_INLINED"}, "lifecycle"},
	} {
		so := buildFixture(t, c.flags...)
		lib, err := OpenLibrary(so)
		if err != nil {
			t.Fatal(err)
		}
		syms, _ := ResolveSymbols(lib)
		src, err := ResolveLayout(lib, syms, Options{})
		if err != nil {
			t.Fatal(err)
		}
		p, err := ChoosePlan(lib, syms, src.Layout, Options{})
		if err != nil {
			t.Fatalf("%v: %v", c.flags, err)
		}
		if p.Kind != c.kind {
			t.Errorf("%v: plan %s (%s), want %s", c.flags, p.Kind, p.Why, c.kind)
		}
		// Independent count: objdump's calls and jumps to track_allocate.
		out, _ := exec.Command("objdump", "-d", "--no-show-raw-insn", so).Output()
		n := len(regexp.MustCompile(`(?m)\t(call|jmp)\s+[0-9a-f]+ <_ZN2tt8tt_metal12GraphTracker14track_allocateEPKNS0_6BufferE(@plt)?>$`).FindAll(out, -1))
		if got := p.CallSites["GraphTracker::track_allocate"]; got != n {
			t.Errorf("%v: %d call sites of track_allocate, objdump shows %d", c.flags, got, n)
		}
		progs := map[Program]int{}
		for _, s := range p.AttachPoints {
			progs[s.Program]++
		}
		if c.kind == "lifecycle" && (progs[ProgAllocEnter] != 1 || progs[ProgAllocExit] == 0 || progs[ProgFree] != 1 || progs["track_allocate"] != 0) {
			t.Errorf("lifecycle sites: %v", progs)
		}
		if c.kind == "tracker" && (progs["track_allocate"] != 1 || progs[ProgAllocEnter] != 0) {
			t.Errorf("tracker sites: %v", progs)
		}
		lib.Close()
	}
}
