// Internal to libtt_metal.so (hidden visibility): the ground-truth ledger and call counters.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tt_metal/allocator.hpp"
#include "tt_metal/types.hpp"

#define TT_REPLICA_HIDDEN __attribute__((visibility("hidden")))

// NOINLINE=1 builds: probed lifecycle functions are never inlined into same-file callers.
#ifdef TT_REPLICA_NOINLINE
#define TT_PROBED __attribute__((noinline))
#else
#define TT_PROBED
#endif

// INLINE_LIFECYCLE=1 builds: Buffer::allocate_impl, deallocate and deallocate_impl are inlined
// into their callers in buffer.cpp (Buffer::create, ~Buffer, deallocate), as an optimizer may;
// their exported out-of-line copies stay.
// INLINE_ALLOCATOR=1 builds: BankManager::allocate_buffer is inlined into the chip allocator's
// allocate_buffer (same file), as an optimizer may; its exported copy stays.
#ifdef TT_REPLICA_INLINE_ALLOCATOR
#define TT_ALLOCATOR_INLINE __attribute__((always_inline))
#else
#define TT_ALLOCATOR_INLINE
#endif

#ifdef TT_REPLICA_INLINE_LIFECYCLE
#define TT_LIFECYCLE __attribute__((always_inline))
#else
#define TT_LIFECYCLE
#endif

// Buffer::create(device, address, ...): clang builds of upstream inline it into Buffer::view
// (same file), so its entry probe misses those views. clang's heuristics weigh the replica's
// copy differently, so clang builds (but NOINLINE=1) ask for it; its exported copy stays.
#if defined(__clang__) && !defined(TT_REPLICA_NOINLINE)
#define TT_VIEW_CREATE __attribute__((always_inline))
#else
#define TT_VIEW_CREATE
#endif

namespace tt::umd {
class ClusterDescriptor;
}  // namespace tt::umd

namespace tt::tt_metal {
class IDevice;
class Device;
class Buffer;
class SharedMemoryStatsProvider;
}  // namespace tt::tt_metal

namespace tt::tt_metal::replica {

// One lock for allocators, ground truth and the GraphTracker calls made while memory changes,
// so the order of track_* calls is the order in which the truth changed.
TT_REPLICA_HIDDEN std::mutex& mem_mutex();

// Fields of a chip's truth; the first five are indexed by BufferType.
// kCb: the CB bytes resident on the chip's busiest core (the program last
// dispatched there, per core); kCbRegistered: the per-core sizes of every
// program holding CBs, summed; kCbResidentTotal: resident CB bytes summed
// over the chip's cores.
enum Field : int {
    kDram = 0,
    kL1 = 1,
    kSystem = 2,
    kL1Small = 3,
    kTrace = 4,
    kCb = 5,
    kLive = 6,
    kCbRegistered = 7,
    kCbResidentTotal = 8,
    kNumFields = 9
};

// All of these require mem_mutex() held.
TT_REPLICA_HIDDEN void touch_chip(int chip);
// delta may be negative; pre = the amount belongs to something made before the attach point.
TT_REPLICA_HIDDEN void charge(int chip, int field, int64_t delta, bool pre);
// set_field sets a field that is a state, not a sum of charges (kCb, kCbResidentTotal).
TT_REPLICA_HIDDEN void set_field(int chip, int field, int64_t value);
TT_REPLICA_HIDDEN void chip_closed(int chip);
TT_REPLICA_HIDDEN void note_unknown_free(uint64_t bytes);
TT_REPLICA_HIDDEN uint64_t attach_epoch();

// A CB region / L1 clash the replica is about to throw for (program.cpp), recorded in the truth.
struct L1Clash {
    const void* program = nullptr;  // ProgramImpl*
    uint64_t program_id = 0;
    int chip = 0;
    uint64_t cb_region_end = 0;
    uint64_t lowest_l1_address = 0;
    uint64_t throw_ts_ns = 0;  // CLOCK_MONOTONIC, just before the throw
    struct InTheWay {
        const void* buffer;  // the Buffer* owning the allocation (a mesh buffer's backing buffer)
        uint64_t address;
        uint64_t size;
    };
    std::vector<InTheWay> l1_buffers;  // L1 allocations starting below cb_region_end, by address
    // HYBRID: the lowest address is a per-core buffer's on a bank of one of the ranges' cores
    // (no lockstep allocation is below the region).
    bool per_core = false;
    struct Range {  // a CB allocator (unique core range) whose region end passes the lowest there
        uint64_t x0, y0, x1, y1;
        uint64_t cb_region_end;
        uint64_t lowest_l1_address;  // on its cores
    };
    std::vector<Range> ranges;
};
TT_REPLICA_HIDDEN void note_l1_clash(const L1Clash& clash);

// TT-NN ops (ops.cpp, README "Ops"): the op a record was made in, from the thread's op frames
// (tt_replica_op_enter/leave, called by the TT-NN stand-in). All require mem_mutex() held.
struct OpLaunch {  // one device-op launch; its runtime id once Program::set_runtime_id gave it
    bool has_runtime_id = false;
    uint64_t runtime_id = 0;
};
struct OpRef {
    int32_t name = -1;       // the innermost top-level op (interned Python name); -1: none
    int32_t device_op = -1;  // the innermost device op launched inside it; -1: none
    int32_t depth = 0;       // top-level ops live on the thread
    std::shared_ptr<OpLaunch> launch;
    bool live() const { return name >= 0 || device_op >= 0; }
};
TT_REPLICA_HIDDEN OpRef ops_current();
// An allocation just made (Buffer::allocate_impl): recorded with the thread's op, charged to its row.
TT_REPLICA_HIDDEN void ops_note_alloc(const Buffer* buffer);
// A failed allocation on this thread: its op (charged to the row's failures).
TT_REPLICA_HIDDEN OpRef ops_note_failure();
// The op of a program's CB layout or dispatch: the thread's, or else the op of the launch that last
// gave the program its runtime id.
TT_REPLICA_HIDDEN OpRef ops_of_program(const void* program);
TT_REPLICA_HIDDEN void ops_note_layout(const void* program, uint64_t program_id, const OpRef& op);
TT_REPLICA_HIDDEN void ops_note_cb(const OpRef& op, uint64_t size, bool global);
// A Metal trace call's entry on this thread (call: begin, end, replay, release): listed with its
// op (op_traces).
TT_REPLICA_HIDDEN void ops_note_trace(const char* call, uint32_t trace, bool mesh);
// Program::set_runtime_id (takes mem_mutex itself).
TT_REPLICA_HIDDEN void ops_set_runtime_id(const void* program, uint64_t id);
TT_REPLICA_HIDDEN void ops_program_gone(const void* program);
TT_REPLICA_HIDDEN void ops_mark_attach();
// `,"op":{...}` for a record made in op r, "" outside any op.
TT_REPLICA_HIDDEN std::string ops_json(const OpRef& r);
TT_REPLICA_HIDDEN void ops_truth_json(std::string& out);
// The process's total of a field over its chips since the attach point (ops' peaks).
TT_REPLICA_HIDDEN int64_t process_level(int field);

// A failed BankManager::allocate_buffer (allocator.cpp), recorded in the truth with the
// statistics of its bank manager before and after the failure.
struct AllocFailure {
    int tid = 0;
    int chip = -1;
    int mesh = -1;                       // a mesh's bank manager: its MeshDevice::id()
    const void* mesh_device = nullptr;  // and its MeshDevice*
    BufferType type = BufferType::DRAM;
    uint64_t size = 0;       // what the bank manager got (the buffer's aligned size)
    uint64_t page_size = 0;  // aligned page size
    uint32_t banks = 0;      // banks or shards the request spreads over
    uint64_t size_per_bank = 0;
    uint64_t span = 0;  // what the free list needed in every bank
    bool bottom_up = false;
    uint64_t bank_size = 0;
    const char* cause = "";  // larger_than_bank | exhausted | fragmented
    std::string message;
    Statistics before, after;
    // The allocator asked (0: lockstep; HYBRID per-core: bank + 1) and, for a per-core one,
    // its bank seen through both lists (cause is then of these numbers).
    uint32_t allocator_id = 0;
    Statistics core;
    // Where it was asked for: the return addresses of the frames above
    // BankManager::allocate_buffer (its caller's first), from libgcc's unwinder.
    std::vector<uint64_t> callers;
    OpRef op;  // the op it was asked for in
};
TT_REPLICA_HIDDEN void note_alloc_failure(const AllocFailure& failure);
// The return addresses of the frames above the caller of this function, innermost first.
TT_REPLICA_HIDDEN std::vector<uint64_t> callers_of_caller();

// Calls counted for the truth JSON (entries of probed functions). Lock-free.
enum Call : int {
    kBufferCreateView = 0,
    kAllocateCircularBuffers,
    kDeallocateCircularBuffers,
    kProgramDestroy,
    kDeviceClose,
    kMeshClose,
    kMarkAsDeallocated,
    // Buffer::deallocate_impl of an allocated, non-empty buffer whose device was closed: no
    // track_deallocate (upstream's rule), but a real call of the function.
    kDeallocateOnClosedDevice,
    // Buffer::view: each makes one view through Buffer::create(device, address, ...), counted in
    // kBufferCreateView too, where that create may be inlined (clang -O3).
    kBufferView,
    // detail::ProgramImpl::generate_dispatch_commands: one per program enqueue (program.cpp).
    kGenerateDispatchCommands,
    kNumCalls
};
// Out of line in another TU: a probed function's first instruction is never a lock-prefixed
// atomic (a uprobe cannot single-step those).
TT_REPLICA_HIDDEN void count_call(Call call);

// Metal trace truth (trace.cpp). Require mem_mutex() held. trace_note_alloc: an allocation a
// chip's allocator reserved (remembered by the captures active on the chip); returns its serial.
TT_REPLICA_HIDDEN uint64_t trace_note_alloc(int chip, BufferType type, DeviceAddr addr, DeviceAddr span,
                                            const Buffer* owner, DeviceAddr size);
// trace_group(true) ... (false): the reservations between are one (mesh) allocation's.
TT_REPLICA_HIDDEN void trace_group(bool on);
TT_REPLICA_HIDDEN void traces_device_closed(const Device* chip);
TT_REPLICA_HIDDEN void trace_truth_json(std::string& out);
TT_REPLICA_HIDDEN void trace_mark_attach();

// CB residency (program.cpp, docs/ttmetal.md §12): per chip and core, the locally allocated CBs
// of the program last dispatched there, as [address, end) ranges. Require mem_mutex() held.
struct CbResident {
    const void* program = nullptr;  // ProgramImpl*
    uint64_t program_id = 0;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;  // sorted, merged
    uint64_t bytes() const;
};
TT_REPLICA_HIDDEN void cb_note_alloc(const void* program, const IDevice* device, const CoreRangeSet& ranges,
                                     uint64_t address, uint64_t size, bool global, const OpRef& op);
TT_REPLICA_HIDDEN void cb_set_resident(int chip, uint64_t x, uint64_t y, const CbResident& r);
TT_REPLICA_HIDDEN void cb_chip_closed(int chip);
TT_REPLICA_HIDDEN void cb_note_replay(const IDevice* device, uint32_t trace_id, const std::vector<const Device*>& chips);
TT_REPLICA_HIDDEN void cb_truth_json(std::string& out);
// The UMD stand-in (umd.cpp): the SHM provider a new Device attaches (null when the topology is
// off or has no such chip), and the topology in the truth.
TT_REPLICA_HIDDEN std::unique_ptr<tt::tt_metal::SharedMemoryStatsProvider> make_shm_provider(int device_id);
TT_REPLICA_HIDDEN void umd_truth_json(std::string& out);
// The process's cluster descriptor, which the MetalContext's tt::Cluster points to (null when the
// topology is off).
TT_REPLICA_HIDDEN tt::umd::ClusterDescriptor* cluster_descriptor();
TT_REPLICA_HIDDEN void cb_mark_attach();
// A dispatch on a chip where a trace is being captured (trace.cpp): the core's footprint goes into
// the capture's per-core peak and nothing becomes resident. Returns whether a capture is active.
TT_REPLICA_HIDDEN bool trace_note_cb_dispatch(int chip, uint64_t x, uint64_t y, const CbResident& r);

// L1 per core (truth.cpp, docs/ttmetal.md §12), as the summary's l1_busiest_core defines it:
// per chip, the lockstep L1 and L1_SMALL spans per bank (every core holds them), the per-core
// spans per bank, the resident CBs per core (program.cpp). l1_lock / l1_per_core change a chip's
// spans; l1_settle, after each change as a tracer sees it (an allocation, a free, a per-core
// buffer with all its cores, a dispatch or replay on the chip, a close), keeps its peak.
// Require mem_mutex() held.
TT_REPLICA_HIDDEN void l1_lock(int chip, int64_t span);
TT_REPLICA_HIDDEN void l1_per_core(int chip, uint32_t bank, int64_t span);
TT_REPLICA_HIDDEN void l1_settle(int chip);
// The core holding the most resident CBs on chip (the lowest x, then y, among ties) and its
// bytes; false when none holds any (program.cpp).
TT_REPLICA_HIDDEN bool cb_busiest(int chip, uint64_t* x, uint64_t* y, uint64_t* bytes);
// A core's resident CB bytes on chip (program.cpp).
TT_REPLICA_HIDDEN uint64_t cb_on_core(int chip, uint64_t x, uint64_t y);

// Device registry (device.cpp). Require mem_mutex() held.
TT_REPLICA_HIDDEN std::vector<Device*> open_devices_locked();
TT_REPLICA_HIDDEN void device_closed_locked(Device* device);

// The chips behind a device: itself for a Device, its chips for a MeshDevice.
TT_REPLICA_HIDDEN std::vector<const Device*> chips_of(const IDevice* device);

}  // namespace tt::tt_metal::replica
