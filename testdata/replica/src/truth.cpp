// Ground truth: per-chip memory as the allocators and the program CB state really hold it.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <string>

#include <unwind.h>

#include "internal.hpp"
#include "tt_metal/replica.hpp"

namespace tt::tt_metal {

const char* buffer_type_name(BufferType type) {
    switch (type) {
        case BufferType::DRAM: return "DRAM";
        case BufferType::L1: return "L1";
        case BufferType::SYSTEM_MEMORY: return "SYSTEM_MEMORY";
        case BufferType::L1_SMALL: return "L1_SMALL";
        case BufferType::TRACE: return "TRACE";
    }
    return "UNKNOWN";
}

namespace replica {
namespace {

struct ChipTruth {
    int64_t cur[kNumFields] = {};
    int64_t pre[kNumFields] = {};  // part of cur made before the attach point
    int64_t peak[kNumFields] = {};
    int64_t wpeak[kNumFields] = {};  // peak since the last window mark (tt_replica_mark_window)
};

// A window (tt_replica_mark_window): per chip, the peaks in it and the levels at its end.
struct WindowTruth {
    std::string name;
    std::map<int, std::pair<std::vector<int64_t>, std::vector<int64_t>>> chips;  // peaks, levels
};

// L1 per core of a chip at one moment, as the summary's l1_busiest_core defines it (docs/ndjson.md):
// lock, the lockstep spans per bank (on every core); pc at bank, the per-core spans of the bank
// holding the most (the lowest id among ties); cb at (x, y), the resident CBs of the core holding
// the most (the lowest x, then y). With both pc and cb, bank and core may be two cores: the total
// is an upper bound. real: what the chip's busiest core really holds (the replica knows each
// bank's core), at (rx, ry).
struct L1Snap {
    uint64_t lock = 0, pc = 0, cb = 0, real = 0;
    uint32_t bank = 0;
    uint64_t x = 0, y = 0, rx = 0, ry = 0;
    bool has_real_core = false;
    uint64_t total() const { return lock + pc + cb; }
};

struct L1Chip {
    uint64_t lock = 0;
    std::map<uint32_t, uint64_t> pc;  // bank -> per-core spans
    L1Snap peak;                      // when total() was first highest
    bool has_peak = false;
    uint64_t real_peak = 0;  // the most any core really held
};

struct Ledger {
    std::map<int, ChipTruth> chips;
    std::map<int, L1Chip> l1;
    uint64_t epoch = 0;
    uint64_t unknown_frees = 0;
    uint64_t unknown_free_bytes = 0;
    bool broken = false;
    std::vector<L1Clash> l1_clashes;
    std::vector<AllocFailure> alloc_failures;
    std::vector<WindowTruth> windows;  // ended ones
    std::string window_name;           // the current window's
};

Ledger& ledger() {
    static Ledger* l = new Ledger();  // never destroyed: no work at exit
    return *l;
}

std::atomic<uint64_t> g_calls[kNumCalls];

const char* const kFieldNames[kNumFields] = {
    "dram_bytes", "l1_bytes",     "system_memory_bytes", "l1_small_bytes",         "trace_bytes",
    "cb_bytes",   "live_buffers", "cb_registered_bytes", "cb_resident_total_bytes"};
// Output order of the JSON fields.
const int kOutOrder[kNumFields] = {kDram, kL1, kL1Small, kTrace, kSystem, kCb, kLive, kCbRegistered, kCbResidentTotal};

const char* const kCallNames[kNumCalls] = {
    "buffer_create_view",
    "allocate_circular_buffers",
    "deallocate_circular_buffers",
    "program_destroy",
    "device_close",
    "mesh_close",
    "mark_as_deallocated",
    "deallocate_on_closed_device",
    "buffer_view",
    "generate_dispatch_commands",
};

}  // namespace

std::mutex& mem_mutex() {
    static std::mutex* m = new std::mutex();
    return *m;
}

void touch_chip(int chip) { ledger().chips[chip]; }

void charge(int chip, int field, int64_t delta, bool pre) {
    ChipTruth& t = ledger().chips[chip];
    t.cur[field] += delta;
    if (pre) t.pre[field] += delta;
    if (t.cur[field] < 0 || t.pre[field] < 0) {
        std::fprintf(stderr, "tt_replica: truth of chip %d field %s went negative\n", chip, kFieldNames[field]);
        ledger().broken = true;
    }
    t.peak[field] = std::max(t.peak[field], t.cur[field] - t.pre[field]);
    t.wpeak[field] = std::max(t.wpeak[field], t.cur[field] - t.pre[field]);
}

void set_field(int chip, int field, int64_t value) { charge(chip, field, value - ledger().chips[chip].cur[field], false); }

namespace {
// Chip id's L1 per core now.
L1Snap l1_now(int chip) {
    L1Snap s;
    const L1Chip& c = ledger().l1[chip];
    s.lock = c.lock;
    for (const auto& [bank, bytes] : c.pc) {
        if (bytes > s.pc) {
            s.pc = bytes;
            s.bank = bank;
        }
    }
    cb_busiest(chip, &s.x, &s.y, &s.cb);
    // What each core really holds: every core with CBs or per-core spans (its bank's core where
    // the chip's allocator says it; a bank whose core is not known counts as a core of its own).
    const ChipAllocator* ca = nullptr;
    for (Device* d : open_devices_locked()) {
        if (d->id() == chip) ca = d->chip_allocator();
    }
    s.real = s.lock;
    auto consider = [&](uint64_t bytes, bool has_core, uint64_t x, uint64_t y) {
        if (bytes + s.lock > s.real || (bytes + s.lock == s.real && !s.has_real_core && has_core)) {
            s.real = bytes + s.lock;
            s.rx = x;
            s.ry = y;
            s.has_real_core = has_core;
        }
    };
    for (const auto& [bank, bytes] : c.pc) {
        std::size_t x = 0, y = 0;
        if (ca != nullptr && ca->l1_core_of_bank(bank, &x, &y)) {
            consider(bytes + cb_on_core(chip, x, y), true, x, y);
        } else {
            consider(bytes, false, 0, 0);
        }
    }
    if (s.cb > 0) {
        // The busiest CB core, and any core whose CBs and per-core spans together pass it, is
        // among the cores above or this one.
        const int64_t bank = ca == nullptr ? -1 : ca->l1_bank_of_core(s.x, s.y);
        auto it = bank < 0 ? c.pc.end() : c.pc.find(static_cast<uint32_t>(bank));
        consider(s.cb + (it == c.pc.end() ? 0 : it->second), true, s.x, s.y);
    }
    return s;
}
}  // namespace

void l1_lock(int chip, int64_t span) {
    L1Chip& c = ledger().l1[chip];
    c.lock = span < 0 && c.lock < static_cast<uint64_t>(-span) ? 0 : c.lock + span;
}

void l1_per_core(int chip, uint32_t bank, int64_t span) {
    L1Chip& c = ledger().l1[chip];
    uint64_t& v = c.pc[bank];
    v = span < 0 && v < static_cast<uint64_t>(-span) ? 0 : v + span;
    if (v == 0) c.pc.erase(bank);
}

void l1_settle(int chip) {
    const L1Snap s = l1_now(chip);
    L1Chip& c = ledger().l1[chip];
    if (s.total() > 0 && (!c.has_peak || s.total() > c.peak.total())) {
        c.peak = s;
        c.has_peak = true;
    }
    c.real_peak = std::max(c.real_peak, s.real);
}

void chip_closed(int chip) {
    cb_chip_closed(chip);
    {
        L1Chip& c = ledger().l1[chip];  // its buffers and CBs are gone; the peaks stay
        c.lock = 0;
        c.pc.clear();
    }
    ChipTruth& t = ledger().chips[chip];
    for (int f = 0; f < kNumFields; ++f) {
        t.cur[f] = 0;
        t.pre[f] = 0;
    }
}

void note_unknown_free(uint64_t bytes) {
    ledger().unknown_frees += 1;
    ledger().unknown_free_bytes += bytes;
}

uint64_t attach_epoch() { return ledger().epoch; }

void note_l1_clash(const L1Clash& clash) { ledger().l1_clashes.push_back(clash); }

void note_alloc_failure(const AllocFailure& failure) {
    ledger().alloc_failures.push_back(failure);
    ledger().alloc_failures.back().op = ops_note_failure();
}

int64_t process_level(int field) {
    int64_t n = 0;
    for (const auto& [id, t] : ledger().chips) n += t.cur[field] - t.pre[field];
    return n;
}

namespace {
struct Walk {
    std::vector<uint64_t>* out;
    int skip;
};
_Unwind_Reason_Code walk_frame(struct _Unwind_Context* ctx, void* arg) {
    Walk* w = static_cast<Walk*>(arg);
    const uint64_t ip = _Unwind_GetIP(ctx);
    if (ip == 0 || w->out->size() >= 128) return _URC_END_OF_STACK;
    if (w->skip > 0) {
        --w->skip;
    } else {
        w->out->push_back(ip);
    }
    return _URC_NO_REASON;
}
}  // namespace

// Frame 0 is this function, frame 1 its caller (the IP there is inside it); the caller's
// caller and up are return addresses.
__attribute__((noinline)) std::vector<uint64_t> callers_of_caller() {
    std::vector<uint64_t> out;
    Walk w{&out, 2};
    _Unwind_Backtrace(walk_frame, &w);
    return out;
}

void count_call(Call call) { g_calls[call].fetch_add(1, std::memory_order_relaxed); }

}  // namespace replica
}  // namespace tt::tt_metal

using namespace tt::tt_metal;

extern "C" void tt_replica_mark_attach(void) {
    std::lock_guard<std::mutex> lock(replica::mem_mutex());
    auto& l = replica::ledger();
    l.epoch += 1;
    l.l1_clashes.clear();  // a tracer attached now sees only the clashes from here on
    l.alloc_failures.clear();
    replica::trace_mark_attach();
    replica::cb_mark_attach();
    replica::ops_mark_attach();
    // Calls are counted from here on: they are what a tracer attached now sees.
    for (auto& c : replica::g_calls) c.store(0, std::memory_order_relaxed);
    GraphTracker::instance().reset_counts();
    for (auto& [id, c] : l.l1) {
        c.has_peak = false;  // L1 per core's peaks restart too (what the chip holds, not what a
        c.real_peak = 0;     // tracer attached now knows of it)
    }
    for (auto& [id, t] : l.chips) {
        for (int f = 0; f < replica::kNumFields; ++f) {
            // Resident CBs are a state (set_field), not a sum of charges: none of it is "made
            // before"; its peak restarts from the states set from here on, which a tracer
            // attached now sees (the residency of a dispatch it saw, docs/ttmetal.md §12).
            const bool state = f == replica::kCb || f == replica::kCbResidentTotal;
            t.pre[f] = state ? 0 : t.cur[f];
            t.peak[f] = 0;
            t.wpeak[f] = 0;
        }
    }
}

// A window ends and the next, named name, starts: the window's peaks restart from the levels now.
extern "C" void tt_replica_mark_window(const char* name) {
    std::lock_guard<std::mutex> lock(replica::mem_mutex());
    auto& l = replica::ledger();
    replica::WindowTruth w{l.window_name, {}};
    for (auto& [id, t] : l.chips) {
        auto& [peaks, levels] = w.chips[id];
        for (int f = 0; f < replica::kNumFields; ++f) {
            peaks.push_back(t.wpeak[f]);
            levels.push_back(t.cur[f] - t.pre[f]);
            t.wpeak[f] = t.cur[f] - t.pre[f];
        }
    }
    l.windows.push_back(std::move(w));
    l.window_name = name;
}

namespace {
// The "allocator" object of a chip or a mesh: get_statistics per type (README "Ground truth").
template <typename Bank>
std::string allocator_json(Bank bank_of, const tt::tt_metal::ChipAllocator* chip) {
    using namespace tt::tt_metal;
    std::string out;
    char buf[768];
    bool first_type = true;
    for (BufferType bt : {BufferType::DRAM, BufferType::L1, BufferType::L1_SMALL, BufferType::TRACE}) {
        const BankManager& bank = bank_of(bt);
        if (bank.num_banks() == 0) continue;
        const Statistics st = bank.get_statistics();
        const bool l1 = bt == BufferType::L1 && chip != nullptr;
        std::snprintf(buf, sizeof buf,
                      "%s\"%s\":{\"banks\":%u,\"bank_size\":%" PRIu64 ",\"alignment\":%u,\"freelist_alignment\":%" PRIu64
                      ",\"base\":%" PRIu64
                      ",\"total_allocatable_size_bytes\":%" PRIu64 ",\"total_allocated_bytes\":%" PRIu64
                      ",\"total_free_bytes\":%" PRIu64 ",\"largest_free_block_bytes\":%" PRIu64
                      ",\"per_core_buffers\":%zu,\"per_core_bytes\":%" PRIu64 "}",
                      first_type ? "" : ",", buffer_type_name(bt), bank.num_banks(), bank.bank_size(), bank.alignment(),
                      bank.free_list().alignment(), bank.base(), st.total_allocatable_size_bytes, st.total_allocated_bytes,
                      st.total_free_bytes, st.largest_free_block_bytes, l1 ? chip->per_core().size() : std::size_t{0},
                      l1 ? chip->per_core_bytes() : DeviceAddr{0});
        out += buf;
        first_type = false;
    }
    return out;
}
}  // namespace

extern "C" int tt_replica_write_truth(const char* path) {
    using namespace tt::tt_metal::replica;
    std::lock_guard<std::mutex> lock(mem_mutex());
    auto& l = ledger();
    int rc = 0;

    struct Leak {
        int device;
        BufferType type;
        DeviceAddr address;
        DeviceAddr size;
    };
    std::vector<Leak> leaks;
    std::vector<Device*> open = open_devices_locked();
    std::sort(open.begin(), open.end(), [](Device* a, Device* b) { return a->id() < b->id(); });
    for (Device* d : open) {
        int64_t sums[kNumFields] = {};
        for (int t = 0; t < kNumBufferTypes; ++t) {
            for (const auto& [addr, block] : d->chip_allocator()->blocks(static_cast<BufferType>(t))) {
                leaks.push_back({d->id(), static_cast<BufferType>(t), addr, block.size});
                sums[t] += static_cast<int64_t>(block.size);
                sums[kLive] += 1;
            }
        }
        for (const auto& [buf, pc] : d->chip_allocator()->per_core()) {
            leaks.push_back({d->id(), BufferType::L1, pc.cores.front().second, pc.size});
            sums[static_cast<int>(BufferType::L1)] += static_cast<int64_t>(pc.size);
            sums[kLive] += 1;
        }
        auto it = l.chips.find(d->id());
        const ChipTruth empty{};
        const ChipTruth& t = it == l.chips.end() ? empty : it->second;
        for (int f = 0; f < kNumFields; ++f) {
            if (f == kCb || f == kCbRegistered || f == kCbResidentTotal) continue;
            if (sums[f] != t.cur[f]) {
                std::fprintf(stderr, "tt_replica: chip %d %s: allocator holds %" PRId64 ", ledger says %" PRId64 "\n",
                             d->id(), kFieldNames[f], sums[f], t.cur[f]);
                rc = -2;
            }
        }
    }
    for (const auto& [id, t] : l.chips) {
        bool is_open = std::any_of(open.begin(), open.end(), [id = id](Device* d) { return d->id() == id; });
        if (!is_open) {
            for (int f = 0; f < kNumFields; ++f) {
                if (t.cur[f] != 0) {
                    std::fprintf(stderr, "tt_replica: closed chip %d has %s = %" PRId64 "\n", id, kFieldNames[f], t.cur[f]);
                    rc = -2;
                }
            }
        }
    }
    if (l.broken) rc = -2;

    std::string out;
    char buf[512];
    std::snprintf(buf, sizeof buf, "{\"pid\":%d,\n \"devices\":[", static_cast<int>(getpid()));
    out += buf;
    bool first = true;
    for (const auto& [id, t] : l.chips) {
        out += first ? "\n  " : ",\n  ";
        first = false;
        std::snprintf(buf, sizeof buf, "{\"device\":%d", id);
        out += buf;
        for (int i = 0; i < kNumFields; ++i) {
            int f = kOutOrder[i];
            std::snprintf(buf, sizeof buf, ",\"%s\":%" PRId64, kFieldNames[f], t.cur[f]);
            out += buf;
        }
        out += ",\"peaks\":{";
        for (int i = 0; i < kNumFields; ++i) {
            int f = kOutOrder[i];
            std::snprintf(buf, sizeof buf, "%s\"%s\":%" PRId64, i ? "," : "", kFieldNames[f], t.peak[f]);
            out += buf;
        }
        out += "}";
        {
            // L1 per core now and at its peak (README "Ground truth", l1_busiest_core).
            // real_total_bytes: what the busiest core really holds (at the peak: the most any
            // core held since the attach point); real_core: that core now, null when no core
            // is known or at the peak.
            auto snap = [&](const L1Snap& v, uint64_t real, bool now) {
                std::string o = "{\"core\":";
                o += v.cb > 0 ? "[" + std::to_string(v.x) + "," + std::to_string(v.y) + "]" : "null";
                if (v.pc > 0) o += ",\"bank\":" + std::to_string(v.bank);
                o += ",\"l1_buffer_bytes\":" + std::to_string(v.lock + v.pc) + ",\"cb_bytes\":" + std::to_string(v.cb) +
                     ",\"total_bytes\":" + std::to_string(v.total()) +
                     ",\"upper_bound\":" + (v.pc > 0 && v.cb > 0 ? "true" : "false") +
                     ",\"real_total_bytes\":" + std::to_string(real) + ",\"real_core\":" +
                      (now && v.has_real_core ? "[" + std::to_string(v.rx) + "," + std::to_string(v.ry) + "]" : std::string("null")) + "}";
                return o;
            };
            const L1Snap now = l1_now(id);
            const L1Chip& c = l.l1[id];
            out += ",\"l1_busiest_core\":" + (now.total() > 0 ? snap(now, now.real, true) : std::string("null"));
            out += ",\"peak_l1_busiest_core\":" + (c.has_peak ? snap(c.peak, c.real_peak, false) : std::string("null"));
        }
        const Device* open_chip = nullptr;
        for (Device* d : open) {
            if (d->id() == id) open_chip = d;
        }
        if (open_chip != nullptr) {
            std::snprintf(buf, sizeof buf, ",\"shape\":\"%s\",\"allocator\":{",
                          chip_shape_name(open_chip->chip_allocator()->config().shape));
            out += buf;
            out += allocator_json([&](BufferType bt) -> const BankManager& {
                return open_chip->chip_allocator()->bank(bt);
            }, open_chip->chip_allocator());
            out += "}";
            // Per-core (HYBRID) buffers per bank: the bank's core, the spans its list holds for
            // them, the lowest of their blocks (README "Ground truth", per_core_banks).
            const ChipAllocator& ca = *open_chip->chip_allocator();
            struct BankUse {
                uint64_t bytes = 0, lowest = UINT64_MAX;
                std::size_t blocks = 0;
            };
            std::map<uint32_t, BankUse> banks;
            for (const auto& [pbuf, pc] : ca.per_core()) {
                for (const auto& [bank, addr] : pc.cores) {
                    BankUse& u = banks[bank];
                    u.bytes += pc.span;
                    u.lowest = std::min<uint64_t>(u.lowest, addr);
                    u.blocks++;
                }
            }
            out += ",\"per_core_banks\":[";
            bool fb = true;
            for (const auto& [bank, u] : banks) {
                std::size_t x = 0, y = 0;
                const bool has_core = ca.l1_core_of_bank(bank, &x, &y);
                std::snprintf(buf, sizeof buf,
                              "%s{\"bank\":%u,\"core\":%s,\"bytes\":%" PRIu64 ",\"blocks\":%zu,\"lowest\":%" PRIu64 "}",
                              fb ? "" : ",", bank,
                              has_core ? ("[" + std::to_string(x) + "," + std::to_string(y) + "]").c_str() : "null",
                              u.bytes, u.blocks, u.lowest);
                out += buf;
                fb = false;
            }
            out += "]";
        }
        out += "}";
    }
    out += "],\n \"meshes\":[";
    {
        // Every open MeshDevice: its own allocator's get_statistics per type (mesh buffers are
        // counted there, never in their chips' allocators).
        bool first_mesh = true;
        for (const auto& m : distributed::MeshDevice::all()) {
            if (!m->is_initialized()) continue;
            const distributed::MeshAllocator* ma = m->mesh_allocator();
            std::snprintf(buf, sizeof buf, "%s{\"mesh_id\":%d,\"mesh_device\":\"%p\",\"parent\":%d,\"shape\":\"%s\",\"chips\":[",
                          first_mesh ? "\n  " : ",\n  ", m->id(), static_cast<const void*>(m.get()),
                          m->get_parent_mesh() ? m->get_parent_mesh()->id() : -1, chip_shape_name(ma->config().shape));
            out += buf;
            first_mesh = false;
            bool first_chip = true;
            for (const Device* c : m->get_devices()) {
                std::snprintf(buf, sizeof buf, "%s%d", first_chip ? "" : ",", c->id());
                out += buf;
                first_chip = false;
            }
            out += "],\"allocator\":{";
            out += allocator_json([&](BufferType bt) -> const BankManager& { return ma->bank(bt); }, nullptr);
            out += "}}";
        }
    }
    out += "],\n \"leaks\":[";
    for (std::size_t i = 0; i < leaks.size(); ++i) {
        const Leak& k = leaks[i];
        std::snprintf(buf, sizeof buf, "%s{\"device\":%d,\"type\":\"%s\",\"address\":%" PRIu64 ",\"size\":%" PRIu64 "}",
                      i ? ",\n  " : "\n  ", k.device, buffer_type_name(k.type), k.address, k.size);
        out += buf;
    }
    out += "],\n \"l1_clashes\":[";
    for (std::size_t i = 0; i < l.l1_clashes.size(); ++i) {
        const L1Clash& c = l.l1_clashes[i];
        std::snprintf(buf, sizeof buf,
                      "%s{\"program\":\"%p\",\"program_id\":%" PRIu64 ",\"device\":%d,\"cb_region_end\":%" PRIu64
                      ",\"lowest_l1_address\":%" PRIu64 ",\"throw_ts_ns\":%" PRIu64 ",\"l1_buffers\":[",
                      i ? ",\n  " : "\n  ", c.program, c.program_id, c.chip, c.cb_region_end, c.lowest_l1_address,
                      c.throw_ts_ns);
        out += buf;
        for (std::size_t j = 0; j < c.l1_buffers.size(); ++j) {
            const auto& b = c.l1_buffers[j];
            std::snprintf(buf, sizeof buf, "%s{\"buffer\":\"%p\",\"address\":%" PRIu64 ",\"size\":%" PRIu64 "}",
                          j ? "," : "", b.buffer, b.address, b.size);
            out += buf;
        }
        out += std::string("],\"per_core\":") + (c.per_core ? "true" : "false") + ",\"core_ranges\":[";
        for (std::size_t j = 0; j < c.ranges.size(); ++j) {
            const auto& r = c.ranges[j];
            std::snprintf(buf, sizeof buf,
                          "%s{\"range\":[%" PRIu64 ",%" PRIu64 ",%" PRIu64 ",%" PRIu64 "],\"cb_region_end\":%" PRIu64
                          ",\"lowest_l1_address\":%" PRIu64 "}",
                          j ? "," : "", r.x0, r.y0, r.x1, r.y1, r.cb_region_end, r.lowest_l1_address);
            out += buf;
        }
        out += "]}";
    }
    out += "],\n \"alloc_failures\":[";
    auto stats_json = [](const Statistics& st) {
        char b[256];
        std::snprintf(b, sizeof b,
                      "{\"total_allocatable_size_bytes\":%" PRIu64 ",\"total_allocated_bytes\":%" PRIu64
                      ",\"total_free_bytes\":%" PRIu64 ",\"largest_free_block_bytes\":%" PRIu64 "}",
                      st.total_allocatable_size_bytes, st.total_allocated_bytes, st.total_free_bytes,
                      st.largest_free_block_bytes);
        return std::string(b);
    };
    for (std::size_t i = 0; i < l.alloc_failures.size(); ++i) {
        const AllocFailure& f = l.alloc_failures[i];
        char mesh_device[32] = "null";
        if (f.mesh_device != nullptr) std::snprintf(mesh_device, sizeof mesh_device, "\"%p\"", f.mesh_device);
        std::snprintf(buf, sizeof buf,
                      "%s{\"tid\":%d,\"device\":%d,\"mesh\":%d,\"mesh_device\":%s,\"type\":\"%s\",\"size\":%" PRIu64
                      ",\"page_size\":%" PRIu64
                      ",\"banks\":%u,\"size_per_bank\":%" PRIu64 ",\"span\":%" PRIu64 ",\"bottom_up\":%s,\"bank_size\":%" PRIu64
                      ",\"cause\":\"%s\",\"before\":",
                      i ? ",\n  " : "\n  ", f.tid, f.chip, f.mesh, mesh_device, buffer_type_name(f.type), f.size, f.page_size,
                      f.banks, f.size_per_bank, f.span, f.bottom_up ? "true" : "false", f.bank_size, f.cause);
        out += buf;
        out += stats_json(f.before) + ",\"after\":" + stats_json(f.after);
        std::snprintf(buf, sizeof buf, ",\"allocator_id\":%u", f.allocator_id);
        out += buf;
        if (f.allocator_id != 0) {
            std::snprintf(buf, sizeof buf, ",\"bank\":%u,\"core\":", f.allocator_id - 1);
            out += buf + stats_json(f.core);
        }
        out += ",\"message\":\"" + f.message + "\",\"callers\":[";
        for (std::size_t j = 0; j < f.callers.size(); ++j) {
            std::snprintf(buf, sizeof buf, "%s%" PRIu64, j ? "," : "", f.callers[j]);
            out += buf;
        }
        out += "]" + ops_json(f.op) + "}";
    }
    out += "]";
    trace_truth_json(out);
    cb_truth_json(out);
    ops_truth_json(out);
    umd_truth_json(out);
    {
        // "windows": each window's peaks and levels (at its end; the current one's now) per chip.
        std::vector<WindowTruth> all = l.windows;
        WindowTruth now{l.window_name, {}};
        for (const auto& [id, t] : l.chips) {
            auto& [peaks, levels] = now.chips[id];
            for (int f = 0; f < kNumFields; ++f) {
                peaks.push_back(t.wpeak[f]);
                levels.push_back(t.cur[f] - t.pre[f]);
            }
        }
        all.push_back(std::move(now));
        out += ",\n \"windows\":[";
        for (std::size_t w = 0; w < all.size(); ++w) {
            out += w ? ",\n  {\"name\":\"" : "\n  {\"name\":\"";
            out += all[w].name + "\",\"devices\":[";
            bool first_chip = true;
            for (const auto& [id, pl] : all[w].chips) {
                std::snprintf(buf, sizeof buf, "%s{\"device\":%d", first_chip ? "" : ",", id);
                out += buf;
                first_chip = false;
                for (const char* part : {"peaks", "levels"}) {
                    const auto& v = part[0] == 'p' ? pl.first : pl.second;
                    out += std::string(",\"") + part + "\":{";
                    for (int i = 0; i < kNumFields; ++i) {
                        int f = kOutOrder[i];
                        std::snprintf(buf, sizeof buf, "%s\"%s\":%" PRId64, i ? "," : "", kFieldNames[f], v[f]);
                        out += buf;
                    }
                    out += "}";
                }
                out += "}";
            }
            out += "]}";
        }
        out += "]";
    }
    std::snprintf(buf, sizeof buf, ",\n \"unknown_frees\":%" PRIu64 ",\"unknown_free_bytes\":%" PRIu64 ",\n \"calls\":{",
                  l.unknown_frees, l.unknown_free_bytes);
    out += buf;
    const GraphTracker& g = GraphTracker::instance();
    std::snprintf(buf, sizeof buf,
                  "\"track_allocate\":%" PRIu64 ",\"track_deallocate\":%" PRIu64 ",\"track_allocate_cb\":%" PRIu64
                  ",\"track_deallocate_cb\":%" PRIu64,
                  g.count(GraphTracker::kAllocate), g.count(GraphTracker::kDeallocate),
                  g.count(GraphTracker::kAllocateCb), g.count(GraphTracker::kDeallocateCb));
    out += buf;
    for (int c = 0; c < kNumCalls; ++c) {
        std::snprintf(buf, sizeof buf, ",\"%s\":%" PRIu64, kCallNames[c], g_calls[c].load());
        out += buf;
    }
    out += "}}\n";

    FILE* f = std::fopen(path, "w");
    if (f == nullptr) {
        std::perror(path);
        return -1;
    }
    bool ok = std::fwrite(out.data(), 1, out.size(), f) == out.size();
    ok = (std::fclose(f) == 0) && ok;
    if (!ok) return -1;
    return rc;
}
