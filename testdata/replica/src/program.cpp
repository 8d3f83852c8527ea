// detail::ProgramImpl circular buffers (docs/ttmetal.md §5).
#include "tt_metal/program.hpp"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <string>

#include "internal.hpp"
#include "tt_metal/device.hpp"
#include "tt_metal/graph_tracking.hpp"

namespace tt::tt_metal::detail {

namespace {
// CBs sit in L1 below the allocator's region; laid out from here, 32-byte aligned.
constexpr uint64_t kCbBase = 0x1000;
constexpr uint64_t kCbAlign = 32;
std::atomic<uint64_t> g_next_program_id{1};
}  // namespace

ProgramImpl::ProgramImpl() : id_(g_next_program_id.fetch_add(1)) {}

ProgramImpl::~ProgramImpl() {
    replica::count_call(replica::kProgramDestroy);
    deallocate_circular_buffers();
    // Legacy: no track_deallocate_cb ever; the CB memory is gone with the program.
    std::lock_guard<std::mutex> lock(replica::mem_mutex());
    release_holds_locked(false);
}

uint32_t ProgramImpl::add_circular_buffer(const CoreRangeSet& core_ranges,
                                          uint64_t size,
                                          bool globally_allocated,
                                          std::shared_ptr<Buffer> backing) {
    if (globally_allocated && !backing) throw std::invalid_argument("a globally allocated CB needs a backing buffer");
    CircularBuffer cb;
    cb.core_ranges = core_ranges;
    cb.size = size;
    cb.globally_allocated = globally_allocated;
    cb.backing = std::move(backing);
    cbs_.push_back(std::move(cb));
    local_circular_buffer_allocation_needed_ = true;
    return static_cast<uint32_t>(cbs_.size() - 1);
}

uint64_t ProgramImpl::circular_buffer_address(uint32_t index) const { return cbs_.at(index).address; }

TT_PROBED void ProgramImpl::allocate_circular_buffers(const IDevice* device) {
    replica::count_call(replica::kAllocateCircularBuffers);
    if (!local_circular_buffer_allocation_needed_) return;

    const std::vector<const Device*> chips = replica::chips_of(device);
    const bool legacy = legacy_cb_behaviour();
    std::lock_guard<std::mutex> lock(replica::mem_mutex());

    // Lay every CB out again from scratch.
    uint64_t next = kCbBase;
    uint64_t local_bytes = 0;
    for (CircularBuffer& cb : cbs_) {
        if (cb.globally_allocated) {
            cb.address = cb.backing->address();
        } else {
            cb.address = next;
            next += (cb.size + kCbAlign - 1) / kCbAlign * kCbAlign;
            local_bytes += cb.size;
        }
    }

    GraphTracker& tracker = GraphTracker::instance();
    if (legacy) {
        // Old upstream: the device as given (a MeshDevice stays a MeshDevice).
        for (const CircularBuffer& cb : cbs_) {
            tracker.track_allocate_cb(cb.core_ranges, cb.address, cb.size, cb.globally_allocated, device);
        }
    } else {
        // 2026 upstream: one call per CB per chip, with that chip's Device*.
        for (const Device* chip : chips) {
            if (!chip->is_initialized()) continue;
            for (const CircularBuffer& cb : cbs_) {
                tracker.track_allocate_cb(cb.core_ranges, cb.address, cb.size, cb.globally_allocated, chip);
            }
        }
    }

    // Ground truth: this layout replaces the program's CBs on those chips.
    const uint64_t epoch = replica::attach_epoch();
    for (const Device* chip : chips) {
        if (!chip->is_initialized()) continue;
        auto it = std::find_if(holds_.begin(), holds_.end(), [chip](const Hold& h) { return h.chip == chip; });
        if (it == holds_.end()) {
            holds_.push_back(Hold{chip, 0, epoch});
            it = std::prev(holds_.end());
        } else {
            replica::charge(chip->id(), replica::kCb, -static_cast<int64_t>(it->bytes), it->epoch < epoch);
        }
        it->bytes = local_bytes;
        it->epoch = epoch;
        replica::touch_chip(chip->id());
        replica::charge(chip->id(), replica::kCb, static_cast<int64_t>(local_bytes), false);
    }
    holds_legacy_ = legacy;
    local_circular_buffer_allocation_needed_ = false;

    validate_circular_buffer_region_locked(chips);
}

// As upstream, once the CBs are laid out and tracked: on each chip, the CB region (bottom-up from
// kCbBase) must end at or below the lowest occupied L1 address (L1 only: L1_SMALL has its own
// region). Every clashing chip is recorded in the truth; the first one is thrown for.
void ProgramImpl::validate_circular_buffer_region_locked(const std::vector<const Device*>& chips) {
    uint64_t cb_region_end = 0;
    const CircularBuffer* last = nullptr;
    for (const CircularBuffer& cb : cbs_) {
        if (!cb.globally_allocated && cb.address + cb.size > cb_region_end) {
            cb_region_end = cb.address + cb.size;
            last = &cb;
        }
    }
    if (last == nullptr) return;
    std::string first_error;
    for (const Device* chip : chips) {
        if (!chip->is_initialized()) continue;
        const auto& blocks = chip->chip_allocator()->blocks(BufferType::L1);
        if (blocks.empty() || blocks.begin()->first >= cb_region_end) continue;
        replica::L1Clash clash;
        clash.program = this;
        clash.program_id = id_;
        clash.chip = chip->id();
        clash.cb_region_end = cb_region_end;
        clash.lowest_l1_address = blocks.begin()->first;
        for (const auto& [addr, block] : blocks) {
            if (addr >= cb_region_end) break;
            clash.l1_buffers.push_back({block.owner, addr, block.size});
        }
        timespec ts{};
        clock_gettime(CLOCK_MONOTONIC, &ts);
        clash.throw_ts_ns = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
        replica::note_l1_clash(clash);
        if (first_error.empty()) {
            std::string range;
            for (const CoreRange& r : last->core_ranges.ranges()) {
                range += (range.empty() ? "" : ", ") + std::string("[(x=") + std::to_string(r.start_coord.x) +
                         ",y=" + std::to_string(r.start_coord.y) + ") - (x=" + std::to_string(r.end_coord.x) +
                         ",y=" + std::to_string(r.end_coord.y) + ")]";
            }
            first_error = "Statically allocated circular buffers in program " + std::to_string(id_) +
                          " clash with L1 buffers on core range {" + range + "}. L1 buffer allocated at " +
                          std::to_string(clash.lowest_l1_address) + " and static circular buffer region ends at " +
                          std::to_string(cb_region_end);
        }
    }
    if (!first_error.empty()) throw std::runtime_error(first_error);
}

TT_PROBED void ProgramImpl::deallocate_circular_buffers() {
    replica::count_call(replica::kDeallocateCircularBuffers);
    std::lock_guard<std::mutex> lock(replica::mem_mutex());
    if (holds_legacy_) return;  // legacy: never calls track_deallocate_cb
    release_holds_locked(true);
}

void ProgramImpl::release_holds_locked(bool track) {
    if (holds_.empty()) return;
    const uint64_t epoch = replica::attach_epoch();
    for (const Hold& h : holds_) {
        if (!h.chip->is_initialized()) continue;  // closed chip: its CBs went with Device::close
        if (track) GraphTracker::instance().track_deallocate_cb(h.chip);
        replica::charge(h.chip->id(), replica::kCb, -static_cast<int64_t>(h.bytes), h.epoch < epoch);
    }
    holds_.clear();
    if (!cbs_.empty()) local_circular_buffer_allocation_needed_ = true;
}

}  // namespace tt::tt_metal::detail
