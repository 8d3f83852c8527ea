// detail::ProgramImpl circular buffers (docs/ttmetal.md §5).
#include "tt_metal/program.hpp"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <map>
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
    replica::ops_program_gone(this);
}

void ProgramImpl::set_runtime_id(uint64_t id) {
    runtime_id_ = id;
    replica::ops_set_runtime_id(this, id);
}

uint64_t ProgramImpl::get_runtime_id() const { return runtime_id_; }

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
    // The op of this layout: the thread's, or the launch's that gave the program its runtime id.
    const replica::OpRef op = replica::ops_of_program(this);
    replica::ops_note_layout(this, id_, op);

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
            replica::cb_note_alloc(this, device, cb.core_ranges, cb.address, cb.size, cb.globally_allocated, op);
            tracker.track_allocate_cb(cb.core_ranges, cb.address, cb.size, cb.globally_allocated, device);
        }
    } else {
        // 2026 upstream: one call per CB per chip, with that chip's Device*.
        for (const Device* chip : chips) {
            if (!chip->is_initialized()) continue;
            for (const CircularBuffer& cb : cbs_) {
                replica::cb_note_alloc(this, chip, cb.core_ranges, cb.address, cb.size, cb.globally_allocated, op);
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
            replica::charge(chip->id(), replica::kCbRegistered, -static_cast<int64_t>(it->bytes), it->epoch < epoch);
        }
        it->bytes = local_bytes;
        it->epoch = epoch;
        replica::touch_chip(chip->id());
        replica::charge(chip->id(), replica::kCbRegistered, static_cast<int64_t>(local_bytes), false);
    }
    holds_legacy_ = legacy;
    local_circular_buffer_allocation_needed_ = false;

    validate_circular_buffer_region_locked(chips);
}

// As upstream (ProgramImpl::validate_circular_buffer_region, docs/ttmetal.md §12), once the CBs
// are laid out and tracked: one CB allocator per unique core range of the local CBs, each marked
// by every CB on its range or on a range intersecting it (unless it is another range's and already
// ends above the CB's address), each region end checked against the lowest occupied L1 address
// (L1 only: L1_SMALL has its own region): in LOCKSTEP mode the lockstep list's, the same on every
// core; in HYBRID mode, per core of the range, the lowest of the lockstep list and the per-core
// list of that core's bank. Every clashing chip is recorded in the truth with its clashing ranges;
// the first range of the first one is thrown for.
void ProgramImpl::validate_circular_buffer_region_locked(const std::vector<const Device*>& chips) {
    struct RangeAlloc {
        CoreRange r;
        uint64_t end = 0;
    };
    auto same = [](const CoreRange& a, const CoreRange& b) {
        return a.start_coord.x == b.start_coord.x && a.start_coord.y == b.start_coord.y &&
               a.end_coord.x == b.end_coord.x && a.end_coord.y == b.end_coord.y;
    };
    auto meet = [](const CoreRange& a, const CoreRange& b) {
        return a.start_coord.x <= b.end_coord.x && b.start_coord.x <= a.end_coord.x &&
               a.start_coord.y <= b.end_coord.y && b.start_coord.y <= a.end_coord.y;
    };
    std::vector<RangeAlloc> allocs;
    uint64_t cb_region_end = 0;
    for (const CircularBuffer& cb : cbs_) {
        if (cb.globally_allocated) continue;
        cb_region_end = std::max(cb_region_end, cb.address + cb.size);
        for (const CoreRange& r : cb.core_ranges.ranges()) {
            if (std::none_of(allocs.begin(), allocs.end(), [&](const RangeAlloc& a) { return same(a.r, r); })) {
                allocs.push_back(RangeAlloc{r, 0});
            }
        }
    }
    if (allocs.empty()) return;
    for (const CircularBuffer& cb : cbs_) {
        if (cb.globally_allocated) continue;
        for (const CoreRange& r : cb.core_ranges.ranges()) {
            for (RangeAlloc& a : allocs) {
                if (!meet(a.r, r) || (!same(a.r, r) && cb.address < a.end)) continue;
                a.end = std::max(a.end, cb.address + cb.size);
            }
        }
    }
    std::string first_error;
    for (const Device* chip : chips) {
        if (!chip->is_initialized()) continue;
        const ChipAllocator& ca = *chip->chip_allocator();
        const auto& blocks = ca.blocks(BufferType::L1);
        const bool has_lock = !blocks.empty();
        const uint64_t lock_low = has_lock ? blocks.begin()->first : 0;
        // HYBRID: each bank's lowest per-core block.
        std::map<uint32_t, uint64_t> pc_low;
        if (ca.config().hybrid) {
            for (const auto& [buf, pc] : ca.per_core()) {
                for (const auto& [bank, addr] : pc.cores) {
                    auto it = pc_low.find(bank);
                    if (it == pc_low.end() || addr < it->second) pc_low[bank] = addr;
                }
            }
        }
        replica::L1Clash clash;
        bool lock_clash = false;
        uint64_t lowest = UINT64_MAX;
        for (const RangeAlloc& a : allocs) {
            if (a.end == 0) continue;
            bool has = has_lock;
            uint64_t low = lock_low;
            for (std::size_t x = a.r.start_coord.x; x <= a.r.end_coord.x && !pc_low.empty(); ++x) {
                for (std::size_t y = a.r.start_coord.y; y <= a.r.end_coord.y; ++y) {
                    const int64_t bank = ca.l1_bank_of_core(x, y);
                    auto it = bank < 0 ? pc_low.end() : pc_low.find(static_cast<uint32_t>(bank));
                    if (it != pc_low.end() && (!has || it->second < low)) {
                        low = it->second;
                        has = true;
                    }
                }
            }
            if (!has || low >= a.end) continue;
            lock_clash = lock_clash || (has_lock && lock_low < a.end);
            lowest = std::min(lowest, low);
            clash.ranges.push_back({a.r.start_coord.x, a.r.start_coord.y, a.r.end_coord.x, a.r.end_coord.y, a.end, low});
            if (first_error.empty()) {
                first_error = "Statically allocated circular buffers in program " + std::to_string(id_) +
                              " clash with L1 buffers on core range [(x=" + std::to_string(a.r.start_coord.x) +
                              ",y=" + std::to_string(a.r.start_coord.y) + ") - (x=" + std::to_string(a.r.end_coord.x) +
                              ",y=" + std::to_string(a.r.end_coord.y) + ")]. L1 buffer allocated at " +
                              std::to_string(low) + " and static circular buffer region ends at " + std::to_string(a.end);
            }
        }
        if (clash.ranges.empty()) continue;
        clash.program = this;
        clash.program_id = id_;
        clash.chip = chip->id();
        clash.cb_region_end = cb_region_end;
        clash.per_core = !lock_clash;
        clash.lowest_l1_address = lock_clash ? lock_low : lowest;
        for (const auto& [addr, block] : blocks) {
            if (addr >= cb_region_end) break;
            clash.l1_buffers.push_back({block.owner, addr, block.size});
        }
        timespec ts{};
        clock_gettime(CLOCK_MONOTONIC, &ts);
        clash.throw_ts_ns = static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
        replica::note_l1_clash(clash);
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
        replica::charge(h.chip->id(), replica::kCbRegistered, -static_cast<int64_t>(h.bytes), h.epoch < epoch);
    }
    holds_.clear();
    if (!cbs_.empty()) local_circular_buffer_allocation_needed_ = true;
}

}  // namespace tt::tt_metal::detail

// ---------------------------------------------------------------- dispatch and CB residency

namespace tt::tt_metal::replica {
namespace {

struct DispatchChip {
    int chip;
    uint64_t max_core_bytes;
    uint64_t resident_bytes;
};
struct Dispatch {
    const void* program;
    uint64_t program_id;
    int chip;                   // the device named, a chip; -1 for a mesh
    const void* mesh_device;    // the MeshDevice named, else nullptr
    bool captured;              // a trace was being captured on its chips: nothing became resident
    int32_t replay_trace = -1;  // >= 0: not a dispatch but a trace replay re-applying its peak
    std::vector<DispatchChip> chips;
    OpRef op;  // the op of the launch that dispatched it
    // The program's CBs on these chips were laid out before the attach point (a cached program):
    // a tracer attached there never saw them laid out.
    bool laid_out_before_attach = false;
};
struct CbAlloc {
    const void* program;
    int chip;
    const void* mesh_device;
    uint64_t address, size;
    bool global;
    std::vector<CoreRange> ranges;
    OpRef op;  // the op of the launch that laid it out
};

struct Residency {
    // chip -> (x, y) -> the CBs resident there
    std::map<int, std::map<std::pair<uint64_t, uint64_t>, CbResident>> chips;
    std::vector<Dispatch> dispatches;  // since the attach point
    std::vector<CbAlloc> allocs;       // every track_allocate_cb since the attach point
};
Residency& residency() {
    static Residency* r = new Residency();
    return *r;
}

DispatchChip summary(int chip) {
    DispatchChip s{chip, 0, 0};
    for (const auto& [core, r] : residency().chips[chip]) {
        s.max_core_bytes = std::max(s.max_core_bytes, r.bytes());
        s.resident_bytes += r.bytes();
    }
    return s;
}

void json_ptr(std::string& out, const void* p) {
    char buf[40];
    if (p == nullptr) {
        out += "null";
        return;
    }
    std::snprintf(buf, sizeof buf, "\"%p\"", p);
    out += buf;
}

void json_chips(std::string& out, const std::vector<DispatchChip>& chips) {
    out += "[";
    for (std::size_t i = 0; i < chips.size(); ++i) {
        out += (i ? "," : "") + std::string("{\"device\":") + std::to_string(chips[i].chip) +
               ",\"max_core_bytes\":" + std::to_string(chips[i].max_core_bytes) +
               ",\"resident_bytes\":" + std::to_string(chips[i].resident_bytes) + "}";
    }
    out += "]";
}

}  // namespace

uint64_t CbResident::bytes() const {
    uint64_t n = 0;
    for (const auto& [a, e] : ranges) n += e - a;
    return n;
}

void cb_set_resident(int chip, uint64_t x, uint64_t y, const CbResident& r) {
    residency().chips[chip][{x, y}] = r;
    const DispatchChip s = summary(chip);
    set_field(chip, kCb, static_cast<int64_t>(s.max_core_bytes));
    set_field(chip, kCbResidentTotal, static_cast<int64_t>(s.resident_bytes));
}

void cb_chip_closed(int chip) { residency().chips.erase(chip); }

bool cb_busiest(int chip, uint64_t* x, uint64_t* y, uint64_t* bytes) {
    *bytes = 0;
    auto it = residency().chips.find(chip);
    if (it == residency().chips.end()) return false;
    for (const auto& [core, r] : it->second) {  // by x, then y: the first of the most
        if (const uint64_t b = r.bytes(); b > *bytes) {
            *bytes = b;
            *x = core.first;
            *y = core.second;
        }
    }
    return *bytes > 0;
}

uint64_t cb_on_core(int chip, uint64_t x, uint64_t y) {
    auto it = residency().chips.find(chip);
    if (it == residency().chips.end()) return 0;
    auto c = it->second.find({x, y});
    return c == it->second.end() ? 0 : c->second.bytes();
}

void cb_note_replay(const IDevice* device, uint32_t trace_id, const std::vector<const Device*>& chips) {
    Dispatch d{nullptr, 0, -1, nullptr, false, static_cast<int32_t>(trace_id), {}, {}};
    if (dynamic_cast<const distributed::MeshDevice*>(device) != nullptr) {
        d.mesh_device = device;
    } else {
        d.chip = device->id();
    }
    for (const Device* chip : chips) {
        d.chips.push_back(summary(chip->id()));
        l1_settle(chip->id());
    }
    residency().dispatches.push_back(std::move(d));
}

void cb_mark_attach() {
    residency().dispatches.clear();
    residency().allocs.clear();
}

void cb_truth_json(std::string& out) {
    Residency& r = residency();
    out += ",\n \"cb_allocs\":[";
    for (std::size_t i = 0; i < r.allocs.size(); ++i) {
        const CbAlloc& a = r.allocs[i];
        out += i ? ",\n  {\"program\":" : "\n  {\"program\":";
        json_ptr(out, a.program);
        out += ",\"device\":" + std::to_string(a.chip) + ",\"mesh_device\":";
        json_ptr(out, a.mesh_device);
        out += ",\"address\":" + std::to_string(a.address) + ",\"size\":" + std::to_string(a.size) +
               ",\"global\":" + (a.global ? "true" : "false") + ",\"core_ranges\":[";
        for (std::size_t j = 0; j < a.ranges.size(); ++j) {
            const CoreRange& c = a.ranges[j];
            out += (j ? ",[" : "[") + std::to_string(c.start_coord.x) + "," + std::to_string(c.start_coord.y) + "," +
                   std::to_string(c.end_coord.x) + "," + std::to_string(c.end_coord.y) + "]";
        }
        out += "]" + ops_json(a.op) + "}";
    }
    out += "],\n \"cb_dispatches\":[";
    for (std::size_t i = 0; i < r.dispatches.size(); ++i) {
        const Dispatch& d = r.dispatches[i];
        out += i ? ",\n  {\"program\":" : "\n  {\"program\":";
        json_ptr(out, d.program);
        out += ",\"program_id\":" + std::to_string(d.program_id) + ",\"device\":" + std::to_string(d.chip) +
               ",\"mesh_device\":";
        json_ptr(out, d.mesh_device);
        out += std::string(",\"captured\":") + (d.captured ? "true" : "false") +
               ",\"laid_out_before_attach\":" + (d.laid_out_before_attach ? "true" : "false") +
               ",\"replay_trace\":" + std::to_string(d.replay_trace) + ",\"chips\":";
        json_chips(out, d.chips);
        out += ops_json(d.op) + "}";
    }
    out += "],\n \"cb_residency\":[";
    bool first = true;
    for (const auto& [chip, cores] : r.chips) {
        const DispatchChip s = summary(chip);
        out += first ? "\n  {\"device\":" : ",\n  {\"device\":";
        first = false;
        out += std::to_string(chip) + ",\"max_core_bytes\":" + std::to_string(s.max_core_bytes) +
               ",\"resident_bytes\":" + std::to_string(s.resident_bytes) + ",\"cores\":[";
        bool fc = true;
        for (const auto& [core, res] : cores) {
            out += fc ? "{\"x\":" : ",{\"x\":";
            fc = false;
            out += std::to_string(core.first) + ",\"y\":" + std::to_string(core.second) + ",\"program\":";
            json_ptr(out, res.program);
            out += ",\"bytes\":" + std::to_string(res.bytes()) + ",\"ranges\":[";
            for (std::size_t j = 0; j < res.ranges.size(); ++j) {
                out += (j ? ",[" : "[") + std::to_string(res.ranges[j].first) + "," +
                       std::to_string(res.ranges[j].second) + "]";
            }
            out += "]}";
        }
        out += "]}";
    }
    out += "]";
}

// A track_allocate_cb call about to be made (under mem_mutex), for the truth's cb_allocs.
void cb_note_alloc(const void* program, const IDevice* device, const CoreRangeSet& ranges, uint64_t address,
                   uint64_t size, bool global, const OpRef& op) {
    CbAlloc a{program, -1, nullptr, address, size, global, ranges.ranges(), op};
    ops_note_cb(op, size, global);
    if (dynamic_cast<const distributed::MeshDevice*>(device) != nullptr) {
        a.mesh_device = device;
    } else {
        a.chip = device->id();
    }
    residency().allocs.push_back(std::move(a));
}

}  // namespace tt::tt_metal::replica

namespace tt::tt_metal::detail {

TT_PROBED void ProgramImpl::generate_dispatch_commands(IDevice* device, bool use_prefetcher_cache) {
    replica::count_call(replica::kGenerateDispatchCommands);
    if (device == nullptr) return;
    std::lock_guard<std::mutex> lock(replica::mem_mutex());
    // A miss assembles the command sequence (upstream caches it per sub-device manager); a hit
    // reuses it. Either way the CB configs are written at the enqueue that follows.
    (void)use_prefetcher_cache;
    command_sequence_cached_ = true;

    // Per core, the program's locally allocated CBs there: upstream writes one CB config per
    // unique core range of the program's CBs, with every CB on that range.
    std::map<std::pair<uint64_t, uint64_t>, replica::CbResident> per_core;
    for (const CircularBuffer& cb : cbs_) {
        if (cb.globally_allocated) continue;
        for (const CoreRange& r : cb.core_ranges.ranges()) {
            for (std::size_t x = r.start_coord.x; x <= r.end_coord.x; ++x) {
                for (std::size_t y = r.start_coord.y; y <= r.end_coord.y; ++y) {
                    auto& res = per_core[{x, y}];
                    res.program = this;
                    res.program_id = id_;
                    res.ranges.emplace_back(cb.address, cb.address + cb.size);
                }
            }
        }
    }
    for (auto& [core, res] : per_core) {
        std::sort(res.ranges.begin(), res.ranges.end());
        std::vector<std::pair<uint64_t, uint64_t>> merged;
        for (const auto& r : res.ranges) {
            if (!merged.empty() && r.first <= merged.back().second) {
                merged.back().second = std::max(merged.back().second, r.second);
            } else {
                merged.push_back(r);
            }
        }
        res.ranges = std::move(merged);
    }

    replica::Dispatch d{this, id_, -1, nullptr, false, -1, {}, replica::ops_of_program(this)};
    if (dynamic_cast<const distributed::MeshDevice*>(device) != nullptr) {
        d.mesh_device = device;
    } else {
        d.chip = device->id();
    }
    const uint64_t epoch = replica::attach_epoch();
    for (const Device* chip : replica::chips_of(device)) {
        if (!chip->is_initialized()) continue;
        for (const Hold& h : holds_) {
            if (h.chip == chip && h.epoch < epoch) d.laid_out_before_attach = true;
        }
        for (const auto& [core, res] : per_core) {
            if (replica::trace_note_cb_dispatch(chip->id(), core.first, core.second, res)) {
                d.captured = true;
            } else {
                replica::cb_set_resident(chip->id(), core.first, core.second, res);
            }
        }
        d.chips.push_back(replica::summary(chip->id()));
        replica::l1_settle(chip->id());
    }
    replica::residency().dispatches.push_back(std::move(d));
}

}  // namespace tt::tt_metal::detail

namespace tt::tt_metal::experimental {

void enqueue_program(IDevice* device, detail::ProgramImpl& program) {
    program.allocate_circular_buffers(device);
    program.generate_dispatch_commands(device, false);
}

}  // namespace tt::tt_metal::experimental

namespace tt::tt_metal {

Program::Program() : internal_(std::make_shared<detail::ProgramImpl>()) {}
Program::~Program() noexcept = default;
Program::Program(Program&& other) noexcept = default;
Program& Program::operator=(Program&& other) noexcept = default;

// Out of line and exported as upstream's (tt_metal/impl/program/program.cpp): the launch's id.
void Program::set_runtime_id(ProgramId id) { internal_->set_runtime_id(id); }

ProgramId Program::get_runtime_id() const { return internal_->get_runtime_id(); }

}  // namespace tt::tt_metal
