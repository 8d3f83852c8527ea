// Metal trace: Device::begin_trace/end_trace/replay_trace/release_trace and their MeshDevice
// forms, in upstream's shapes and call order (docs/ttmetal.md §10), and the ground truth of
// what each replay overwrites.
//
// Upstream: begin_trace checks that the command queue is not already capturing, creates an
// empty trace and starts recording (record_begin); end_trace stops recording (record_end) and
// then stores the commands in a TRACE buffer (Trace::initialize_buffer), or, when the chip has
// no trace region (trace_region_size 0, dynamic trace storage), in a DRAM buffer allocated
// top-down above the DRAM high-water mark of the capture; replay_trace throws for a trace that
// does not exist on the device; release_trace drops it (and its buffer).
//
// The truth (replica only): while a capture is active on a chip, every allocation the chip's
// allocator makes is remembered with its per-bank range (address, span). At each replay, every
// block the chip holds that was reserved after the capture ended and overlaps a remembered
// range of the same type is a hazard: the replay writes there. A pair (endangered allocation,
// captured allocation) is recorded once, at the first replay that finds it.
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "internal.hpp"
#include "tt_metal/buffer.hpp"
#include "tt_metal/device.hpp"
#include "tt_metal/mesh_buffer.hpp"

namespace tt::tt_metal {

namespace replica {
namespace {

struct CapturedRange {
    int chip;
    BufferType type;
    DeviceAddr addr;
    DeviceAddr span;
    DeviceAddr size;
    const Buffer* owner;
    uint64_t serial;  // of its reservation
};

struct TraceEntry {
    const IDevice* device = nullptr;
    bool mesh = false;
    uint32_t id = 0;
    uint8_t cq = 0;
    std::vector<const Device*> chips;  // by id, ascending
    bool capturing = false;
    bool released = false;
    bool closed = false;
    uint64_t end_serial = 0;  // allocations with a larger serial came after the capture ended
    std::vector<CapturedRange> captured;
    std::map<int, DeviceAddr> hwm;  // per chip: highest per-bank DRAM end reserved while capturing
    std::shared_ptr<Buffer> buffer;
    std::shared_ptr<distributed::MeshBuffer> mesh_buffer;
    uint64_t replays = 0;
    // (endangered, captured) reservation serials already recorded: a Buffer* is reused by later
    // buffers, a reservation is not.
    std::set<std::pair<uint64_t, uint64_t>> reported;
    // Per chip and core, the largest CB footprint dispatched while capturing (docs/ttmetal.md
    // §12): what each replay makes resident there.
    std::map<std::tuple<int, uint64_t, uint64_t>, CbResident> cb_peak;
};

struct Hazard {
    uint32_t trace;
    bool mesh;
    uint64_t replay;
    int chip;
    BufferType type;
    const Buffer* buffer;
    DeviceAddr address, size, span;
    const Buffer* captured;
    DeviceAddr captured_address, captured_size, captured_span;
};

struct InvalidReplay {
    uint32_t trace;
    bool mesh;
    const char* reason;  // released | device_closed | unknown
};

struct RegionHazard {
    uint32_t trace;  // whose trace buffer was placed
    bool mesh;
    uint32_t other;  // the live trace whose high-water mark it is under
    int chip;
    DeviceAddr address, size;
    DeviceAddr high_water_mark;
};

struct CaptureAlloc {
    uint32_t trace;
    bool mesh;
    const Buffer* buffer;
    BufferType type;
    DeviceAddr address, size;
};

struct Traces {
    std::vector<std::unique_ptr<TraceEntry>> all;  // in capture order, released ones too
    uint64_t serial = 0;
    bool group = false;        // trace_group: reservations share one serial
    bool group_started = false;
    std::vector<Hazard> hazards;
    std::vector<InvalidReplay> invalid;
    std::vector<RegionHazard> regions;
    std::vector<CaptureAlloc> capture_allocs;
};

Traces& traces() {
    static Traces* t = new Traces();  // never destroyed: trace buffers outlive closed chips
    return *t;
}

// The newest trace with this id on this device (caller holds mem_mutex()).
TraceEntry* find(const IDevice* device, uint32_t id) {
    auto& all = traces().all;
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
        if ((*it)->device == device && (*it)->id == id) return it->get();
    }
    return nullptr;
}

std::vector<const Device*> sorted_chips(const IDevice* device) {
    std::vector<const Device*> v = chips_of(device);
    std::sort(v.begin(), v.end(), [](const Device* a, const Device* b) { return a->id() < b->id(); });
    return v;
}

bool overlaps(DeviceAddr a, DeviceAddr alen, DeviceAddr b, DeviceAddr blen) { return a < b + blen && b < a + alen; }

void begin(const IDevice* device, bool mesh, uint8_t cq, uint32_t id) {
    std::lock_guard<std::mutex> lock(mem_mutex());
    ops_note_trace("begin", id, mesh);
    for (const auto& e : traces().all) {
        if (e->device == device && e->cq == cq && e->capturing) {
            throw std::runtime_error("CQ " + std::to_string(cq) + " is already being used for tracing tid " +
                                     std::to_string(e->id));
        }
    }
    TraceEntry* old = find(device, id);
    if (old != nullptr && !old->released && !old->closed) {
        throw std::runtime_error("Trace already exists for tid " + std::to_string(id) + " on device " +
                                 std::to_string(device->id()));
    }
    auto e = std::make_unique<TraceEntry>();
    e->device = device;
    e->mesh = mesh;
    e->id = id;
    e->cq = cq;
    e->chips = sorted_chips(device);
    e->capturing = true;
    traces().all.push_back(std::move(e));
}

// Stops the capture (record_end); returns the entry, whose trace buffer the caller makes.
TraceEntry* end(const IDevice* device, uint8_t cq, uint32_t id) {
    std::lock_guard<std::mutex> lock(mem_mutex());
    ops_note_trace("end", id, dynamic_cast<const distributed::MeshDevice*>(device) != nullptr);
    TraceEntry* e = find(device, id);
    if (e == nullptr || !e->capturing || e->cq != cq) {
        throw std::runtime_error("CQ " + std::to_string(cq) + " is not being used for tracing tid " + std::to_string(id));
    }
    e->capturing = false;
    e->end_serial = traces().serial;
    return e;
}

// The size of the commands a trace stores: a fixed part and one per captured allocation.
DeviceAddr trace_bytes(const TraceEntry& e) { return 4096 + 2048 * static_cast<DeviceAddr>(e.captured.size()); }

// After the trace buffer of e is placed: with dynamic storage (a DRAM buffer), a buffer below
// the high-water mark of another live trace on the same chip is overwritten when that trace
// replays (upstream checks only the trace's own mark, tt-metal#48869).
void check_region(TraceEntry* e, const Buffer* buf) {
    std::lock_guard<std::mutex> lock(mem_mutex());
    if (buf->buffer_type() != BufferType::DRAM) return;
    for (const auto& other : traces().all) {
        if (other.get() == e || other->released || other->closed || other->capturing) continue;
        for (const Device* chip : e->chips) {
            auto it = other->hwm.find(chip->id());
            if (it == other->hwm.end() || buf->address() >= it->second) continue;
            if (std::find(other->chips.begin(), other->chips.end(), chip) == other->chips.end()) continue;
            traces().regions.push_back(
                RegionHazard{e->id, e->mesh, other->id, chip->id(), buf->address(), buf->size(), it->second});
            break;
        }
    }
}

void replay(const IDevice* device, uint32_t id) {
    std::lock_guard<std::mutex> lock(mem_mutex());
    TraceEntry* e = find(device, id);
    const bool mesh = dynamic_cast<const distributed::MeshDevice*>(device) != nullptr;
    ops_note_trace("replay", id, mesh);
    const char* reason = nullptr;
    if (e == nullptr) {
        reason = "unknown";
    } else if (e->closed || !device->is_initialized()) {
        reason = "device_closed";
    } else if (e->released) {
        reason = "released";
    } else if (e->capturing) {
        reason = "capturing";
    }
    if (reason != nullptr) {
        traces().invalid.push_back(InvalidReplay{id, mesh, reason});
        throw std::runtime_error("Trace instance " + std::to_string(id) + " must exist on device " +
                                 std::to_string(device->id()) + " (" + reason + ")");
    }
    e->replays++;
    for (const auto& [key, res] : e->cb_peak) cb_set_resident(std::get<0>(key), std::get<1>(key), std::get<2>(key), res);
    cb_note_replay(device, id, e->chips);
    for (const Device* chip : e->chips) {
        const ChipAllocator* a = chip->chip_allocator();
        for (const CapturedRange& c : e->captured) {
            if (c.chip != chip->id()) continue;
            for (const auto& [addr, block] : a->blocks(c.type)) {
                if (block.serial <= e->end_serial || !overlaps(addr, block.aligned_size, c.addr, c.span)) continue;
                if (!e->reported.emplace(block.serial, c.serial).second) continue;
                traces().hazards.push_back(Hazard{e->id, e->mesh, e->replays, chip->id(), c.type, block.owner, addr,
                                                  block.size, block.aligned_size, c.owner, c.addr, c.size, c.span});
            }
        }
    }
}

void release(const IDevice* device, uint32_t id) {
    std::shared_ptr<Buffer> buf;
    std::shared_ptr<distributed::MeshBuffer> mbuf;
    {
        std::lock_guard<std::mutex> lock(mem_mutex());
        ops_note_trace("release", id, dynamic_cast<const distributed::MeshDevice*>(device) != nullptr);
        TraceEntry* e = find(device, id);
        if (e == nullptr || e->released) return;  // upstream: erasing a missing id does nothing
        e->released = true;
        buf = std::move(e->buffer);
        mbuf = std::move(e->mesh_buffer);
    }
    // Destroyed outside the lock: the buffer's free takes it.
    buf.reset();
    mbuf.reset();
}

void json_ptr(std::string& out, const char* key, const Buffer* p) {
    char b[64];
    std::snprintf(b, sizeof b, ",\"%s\":\"%p\"", key, static_cast<const void*>(p));
    out += b;
}

}  // namespace

uint64_t trace_note_alloc(int chip, BufferType type, DeviceAddr addr, DeviceAddr span, const Buffer* owner,
                          DeviceAddr size) {
    Traces& t = traces();
    if (!t.group || !t.group_started) ++t.serial;
    t.group_started = t.group;
    const uint64_t serial = t.serial;
    for (const auto& e : t.all) {
        if (!e->capturing) continue;
        auto on = std::find_if(e->chips.begin(), e->chips.end(), [&](const Device* d) { return d->id() == chip; });
        if (on == e->chips.end()) continue;
        bool seen = false;
        for (const CapturedRange& c : e->captured) seen = seen || c.serial == serial;
        if (!seen) t.capture_allocs.push_back(CaptureAlloc{e->id, e->mesh, owner, type, addr, size});
        e->captured.push_back(CapturedRange{chip, type, addr, span, size, owner, serial});
        if (type == BufferType::DRAM) e->hwm[chip] = std::max(e->hwm[chip], addr + span);
    }
    return serial;
}

bool trace_note_cb_dispatch(int chip, uint64_t x, uint64_t y, const CbResident& r) {
    bool capturing = false;
    for (const auto& e : traces().all) {
        if (!e->capturing) continue;
        if (std::none_of(e->chips.begin(), e->chips.end(), [&](const Device* d) { return d->id() == chip; })) continue;
        capturing = true;
        auto [it, fresh] = e->cb_peak.try_emplace({chip, x, y}, r);
        if (!fresh && r.bytes() > it->second.bytes()) it->second = r;
    }
    return capturing;
}

void trace_group(bool on) {
    traces().group = on;
    traces().group_started = false;
}

void traces_device_closed(const Device* chip) {
    for (const auto& e : traces().all) {
        if (std::find(e->chips.begin(), e->chips.end(), chip) != e->chips.end()) e->closed = true;
    }
}

void trace_truth_json(std::string& out) {
    Traces& t = traces();
    char b[512];
    out += ",\n \"traces\":[";
    for (std::size_t i = 0; i < t.all.size(); ++i) {
        const TraceEntry& e = *t.all[i];
        std::set<const Buffer*> owners;
        for (const CapturedRange& c : e.captured) owners.insert(c.owner);
        std::snprintf(b, sizeof b,
                      "%s{\"trace\":%u,\"mesh\":%s,\"cq\":%u,\"captured\":%zu,\"replays\":%" PRIu64
                      ",\"released\":%s,\"closed\":%s}",
                      i ? ",\n  " : "\n  ", e.id, e.mesh ? "true" : "false", e.cq, owners.size(), e.replays,
                      e.released ? "true" : "false", e.closed ? "true" : "false");
        out += b;
    }
    out += "],\n \"trace_hazards\":[";
    for (std::size_t i = 0; i < t.hazards.size(); ++i) {
        const Hazard& h = t.hazards[i];
        std::snprintf(b, sizeof b,
                      "%s{\"trace\":%u,\"mesh\":%s,\"replay\":%" PRIu64 ",\"device\":%d,\"buffer_type\":\"%s\""
                      ",\"address\":%" PRIu64 ",\"size\":%" PRIu64 ",\"span\":%" PRIu64 ",\"captured_address\":%" PRIu64
                      ",\"captured_size\":%" PRIu64 ",\"captured_span\":%" PRIu64,
                      i ? ",\n  " : "\n  ", h.trace, h.mesh ? "true" : "false", h.replay, h.chip,
                      buffer_type_name(h.type), h.address, h.size, h.span, h.captured_address, h.captured_size,
                      h.captured_span);
        out += b;
        json_ptr(out, "buffer", h.buffer);
        json_ptr(out, "captured_buffer", h.captured);
        out += "}";
    }
    out += "],\n \"trace_invalid_replays\":[";
    for (std::size_t i = 0; i < t.invalid.size(); ++i) {
        const InvalidReplay& r = t.invalid[i];
        std::snprintf(b, sizeof b, "%s{\"trace\":%u,\"mesh\":%s,\"reason\":\"%s\"}", i ? ",\n  " : "\n  ", r.trace,
                      r.mesh ? "true" : "false", r.reason);
        out += b;
    }
    out += "],\n \"trace_region_hazards\":[";
    for (std::size_t i = 0; i < t.regions.size(); ++i) {
        const RegionHazard& r = t.regions[i];
        std::snprintf(b, sizeof b,
                      "%s{\"trace\":%u,\"mesh\":%s,\"other_trace\":%u,\"device\":%d,\"address\":%" PRIu64
                      ",\"size\":%" PRIu64 ",\"high_water_mark\":%" PRIu64 "}",
                      i ? ",\n  " : "\n  ", r.trace, r.mesh ? "true" : "false", r.other, r.chip, r.address, r.size,
                      r.high_water_mark);
        out += b;
    }
    out += "],\n \"trace_capture_allocs\":[";
    for (std::size_t i = 0; i < t.capture_allocs.size(); ++i) {
        const CaptureAlloc& c = t.capture_allocs[i];
        std::snprintf(b, sizeof b,
                      "%s{\"trace\":%u,\"mesh\":%s,\"buffer_type\":\"%s\",\"address\":%" PRIu64 ",\"size\":%" PRIu64,
                      i ? ",\n  " : "\n  ", c.trace, c.mesh ? "true" : "false", buffer_type_name(c.type), c.address,
                      c.size);
        out += b;
        json_ptr(out, "buffer", c.buffer);
        out += "}";
    }
    out += "]";
}

void trace_mark_attach() {
    Traces& t = traces();
    t.hazards.clear();
    t.invalid.clear();
    t.regions.clear();
    t.capture_allocs.clear();
}

}  // namespace replica

namespace {
std::atomic<uint32_t> g_trace_id{0};
std::atomic<uint32_t> g_mesh_trace_id{0};

// The chip's trace region: 0 means dynamic trace storage (DRAM, top-down).
DeviceAddr trace_region(const Device* d) { return d->chip_allocator()->bank(BufferType::TRACE).bank_size(); }
}  // namespace

uint32_t Trace::next_id() { return g_trace_id.fetch_add(1); }

void Device::begin_trace(uint8_t cq_id, uint32_t tid) { replica::begin(this, false, cq_id, tid); }

void Device::end_trace(uint8_t cq_id, uint32_t tid) {
    replica::TraceEntry* e = replica::end(this, cq_id, tid);
    const DeviceAddr size = replica::trace_bytes(*e);
    std::shared_ptr<Buffer> buf;
    if (trace_region(this) == 0) {
        buf = Buffer::create(this, size, 1024, BufferType::DRAM, BufferShardingArgs{}, false);
    } else {
        buf = Buffer::create(this, size, 1024, BufferType::TRACE);
    }
    replica::check_region(e, buf.get());
    std::lock_guard<std::mutex> lock(replica::mem_mutex());
    e->buffer = std::move(buf);
}

void Device::replay_trace(uint8_t cq_id, uint32_t tid, bool block_on_device, bool block_on_worker_thread) {
    (void)cq_id;
    (void)block_on_device;
    (void)block_on_worker_thread;
    replica::replay(this, tid);
}

// The older one-bool form: its own body (the old Device's replay_trace), not a call to the
// two-bool form, so a tracer must probe it by its own symbol.
void Device::replay_trace(uint8_t cq_id, uint32_t tid, bool blocking) {
    (void)cq_id;
    (void)blocking;
    replica::replay(this, tid);
}

void Device::release_trace(uint32_t tid) { replica::release(this, tid); }

namespace distributed {

MeshTraceId MeshTrace::next_id() { return MeshTraceId(g_mesh_trace_id.fetch_add(1)); }

// As 2026 upstream (MeshDeviceImpl::begin_mesh_trace(cq_id)): the id is taken here and the
// capture begins without going through the two-argument public form.
MeshTraceId MeshDevice::begin_mesh_trace(uint8_t cq_id) {
    MeshTraceId id = MeshTrace::next_id();
    replica::begin(this, true, cq_id, id.get());
    return id;
}

void MeshDevice::begin_mesh_trace(uint8_t cq_id, const MeshTraceId& trace_id) {
    replica::begin(this, true, cq_id, trace_id.get());
}

void MeshDevice::end_mesh_trace(uint8_t cq_id, const MeshTraceId& trace_id) {
    replica::TraceEntry* e = replica::end(this, cq_id, trace_id.get());
    auto buf = MeshBuffer::create(this, replica::trace_bytes(*e), 1024, BufferType::TRACE);
    std::lock_guard<std::mutex> lock(replica::mem_mutex());
    e->mesh_buffer = std::move(buf);
}

void MeshDevice::replay_mesh_trace(uint8_t cq_id, const MeshTraceId& trace_id, bool blocking) {
    (void)cq_id;
    (void)blocking;
    replica::replay(this, trace_id.get());
}

void MeshDevice::release_mesh_trace(const MeshTraceId& trace_id) { replica::release(this, trace_id.get()); }

// The MeshCommandQueue& overloads, as 2026 upstream: check the queue is this mesh's, then go
// to the implementation with cq.id() (upstream's pimpl_->*_mesh_trace(cq_id, ...)), not
// through the cq-id forms above.
namespace {
void check_queue(const MeshDevice* mesh, const MeshCommandQueue& cq) {
    if (cq.device() != mesh) throw std::runtime_error("MeshCommandQueue belongs to a different MeshDevice");
}
}  // namespace

MeshTraceId MeshDevice::begin_mesh_trace(MeshCommandQueue& cq) {
    check_queue(this, cq);
    MeshTraceId id = MeshTrace::next_id();
    replica::begin(this, true, static_cast<uint8_t>(cq.id()), id.get());
    return id;
}

void MeshDevice::begin_mesh_trace(MeshCommandQueue& cq, const MeshTraceId& trace_id) {
    check_queue(this, cq);
    replica::begin(this, true, static_cast<uint8_t>(cq.id()), trace_id.get());
}

void MeshDevice::end_mesh_trace(MeshCommandQueue& cq, const MeshTraceId& trace_id) {
    check_queue(this, cq);
    replica::TraceEntry* e = replica::end(this, static_cast<uint8_t>(cq.id()), trace_id.get());
    auto buf = MeshBuffer::create(this, replica::trace_bytes(*e), 1024, BufferType::TRACE);
    std::lock_guard<std::mutex> lock(replica::mem_mutex());
    e->mesh_buffer = std::move(buf);
}

void MeshDevice::replay_mesh_trace(MeshCommandQueue& cq, const MeshTraceId& trace_id, bool blocking) {
    check_queue(this, cq);
    (void)blocking;
    replica::replay(this, trace_id.get());
}

}  // namespace distributed
}  // namespace tt::tt_metal
