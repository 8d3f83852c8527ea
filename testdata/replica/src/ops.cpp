// TT-NN op truth (issue #31, README "Ops"): which op made every allocation, CB layout, dispatch
// and failure. The TT-NN stand-in (testdata/replica/ttnn/) calls tt_replica_op_enter/leave at the
// entry and exit of each op function (RAII, so a throw leaves too); this file keeps, per thread,
// the stack of op frames that gives, at any point, the op a record was made in: the innermost
// top-level op (its Python name), the innermost device op launched inside it, that launch's
// runtime id (Program::set_runtime_id, joined to everything of the launch, also what came before
// it) and the number of top-level ops live. Never from a tracer.
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "internal.hpp"
#include "tt_metal/allocator.hpp"
#include "tt_metal/buffer.hpp"
#include "tt_metal/device.hpp"
#include "tt_metal/replica.hpp"

namespace tt::tt_metal::replica {
namespace {

constexpr std::size_t kMaxFrames = 64;         // per thread; deeper entries are counted, not kept
constexpr std::size_t kMaxRecords = 200000;    // op_allocs / op_layouts kept (then truncated)

struct Frame {
    int32_t name;  // interned
    bool device;
    std::shared_ptr<OpLaunch> launch;  // device frames: the launch (shared by a chain of the same op)
};

// Each thread's frames, made at its first op: a thread_local object with a
// destructor would register it at the thread's exit (__cxa_thread_atexit),
// which keeps the library loaded for good, and a clang build must unload
// at dlclose (TestE2EReload). A pointer has no destructor: a thread's
// frames stay allocated when it exits.
thread_local std::vector<Frame>* t_frames_p = nullptr;

std::vector<Frame>& frames() {
    if (t_frames_p == nullptr) t_frames_p = new std::vector<Frame>();
    return *t_frames_p;
}
thread_local std::size_t t_overflow = 0;  // entries past kMaxFrames not yet left

struct AllocRecord {
    uint64_t n;
    int tid;
    const void* buffer;
    int chip;
    int mesh;
    BufferType type;
    uint64_t address, size;
    bool hooked;
    OpRef op;
};

struct LayoutRecord {
    const void* program;
    uint64_t program_id;
    int tid;
    OpRef op;
};

struct TraceCall {
    int tid;
    const char* call;
    uint32_t trace;
    bool mesh;
    OpRef op;
};

struct Row {
    uint64_t calls = 0, allocs = 0, bytes = 0, cb_bytes = 0, failures = 0;
    int64_t peak_dram = 0, peak_l1 = 0;
};

struct OpsTruth {
    std::vector<std::string> names;
    std::unordered_map<std::string, int32_t> ids;
    bool recording = false;
    uint64_t next_n = 0;
    uint64_t too_deep = 0;
    bool truncated = false;
    std::vector<AllocRecord> allocs;
    std::vector<LayoutRecord> layouts;
    std::vector<TraceCall> trace_calls;
    std::map<std::pair<int32_t, int32_t>, Row> rows;       // (name, device_op); -1: none
    std::unordered_map<const void*, OpRef> programs;       // ProgramImpl* -> op of its last set_runtime_id
    std::unordered_map<const void*, OpRef> owners;         // Buffer* -> op of its last allocation (leaks)
};

OpsTruth& ops() {
    static OpsTruth* t = new OpsTruth();  // never destroyed
    return *t;
}

int32_t intern(const char* name) {
    OpsTruth& o = ops();
    std::string s = name ? name : "";
    auto it = o.ids.find(s);
    if (it != o.ids.end()) return it->second;
    const int32_t id = static_cast<int32_t>(o.names.size());
    o.names.push_back(s);
    o.ids.emplace(std::move(s), id);
    return id;
}

Row& row_of(const OpRef& r) { return ops().rows[{r.name, r.device_op}]; }

int this_tid() {
    thread_local int tid = static_cast<int>(syscall(SYS_gettid));
    return tid;
}

void json_string(std::string& out, const std::string& s) {
    out += '"';
    for (char c : s) {
        if (c == '"' || c == '\\') out += '\\';
        out += c;
    }
    out += '"';
}

}  // namespace

OpRef ops_current() {
    OpRef r;
    int top = -1;
    for (std::size_t i = 0; i < frames().size(); ++i) {
        if (!frames()[i].device) {
            top = static_cast<int>(i);
            r.depth += 1;
        }
    }
    if (top >= 0) r.name = frames()[top].name;
    for (int i = static_cast<int>(frames().size()) - 1; i > top; --i) {
        if (frames()[i].device) {
            r.device_op = frames()[i].name;
            r.launch = frames()[i].launch;
            break;
        }
    }
    return r;
}

void ops_note_alloc(const Buffer* buffer) {
    OpsTruth& o = ops();
    const OpRef r = ops_current();
    const IDevice* dev = buffer->device();
    int chip = -1, mesh = -1;
    if (auto* m = dynamic_cast<const distributed::MeshDevice*>(dev)) {
        mesh = m->id();
    } else if (dev != nullptr) {
        chip = dev->id();
    }
    const bool hooked = buffer->hooked_allocation();
    const uint64_t n = o.next_n++;
    if (o.recording) {
        if (o.allocs.size() < kMaxRecords) {
            o.allocs.push_back(AllocRecord{n, this_tid(), buffer, chip, mesh, buffer->buffer_type(), buffer->address(),
                                           buffer->size(), hooked, r});
        } else {
            o.truncated = true;
        }
    }
    if (!r.live() || hooked) {
        o.owners.erase(buffer);
        return;
    }
    o.owners[buffer] = r;
    Row& row = row_of(r);
    row.allocs += 1;
    row.bytes += buffer->size();
    row.peak_dram = std::max(row.peak_dram, process_level(kDram));
    row.peak_l1 = std::max(row.peak_l1, process_level(kL1));
}

OpRef ops_note_failure() {
    const OpRef r = ops_current();
    if (r.live()) row_of(r).failures += 1;
    return r;
}

OpRef ops_of_program(const void* program) {
    OpRef r = ops_current();
    if (r.live()) return r;
    auto it = ops().programs.find(program);
    return it == ops().programs.end() ? OpRef{} : it->second;
}

void ops_note_layout(const void* program, uint64_t program_id, const OpRef& op) {
    OpsTruth& o = ops();
    if (!o.recording) return;
    if (o.layouts.size() < kMaxRecords) {
        o.layouts.push_back(LayoutRecord{program, program_id, this_tid(), op});
    } else {
        o.truncated = true;
    }
}

void ops_note_trace(const char* call, uint32_t trace, bool mesh) {
    OpsTruth& o = ops();
    if (!o.recording) return;
    if (o.trace_calls.size() < kMaxRecords) {
        o.trace_calls.push_back(TraceCall{this_tid(), call, trace, mesh, ops_current()});
    } else {
        o.truncated = true;
    }
}

void ops_note_cb(const OpRef& op, uint64_t size, bool global) {
    if (op.live() && !global) row_of(op).cb_bytes += size;
}

void ops_set_runtime_id(const void* program, uint64_t id) {
    std::lock_guard<std::mutex> lock(mem_mutex());
    // The innermost device-op frame of this thread is the launch the id belongs to.
    for (auto it = frames().rbegin(); it != frames().rend(); ++it) {
        if (it->device) {
            it->launch->has_runtime_id = true;
            it->launch->runtime_id = id;
            break;
        }
    }
    const OpRef r = ops_current();
    if (r.live()) {
        ops().programs[program] = r;
    } else {
        ops().programs.erase(program);
    }
}

void ops_program_gone(const void* program) { ops().programs.erase(program); }

void ops_mark_attach() {
    OpsTruth& o = ops();
    o.allocs.clear();
    o.layouts.clear();
    o.trace_calls.clear();
    o.rows.clear();
    o.owners.clear();
    o.truncated = false;
    o.too_deep = 0;
    o.next_n = 0;
}

std::string ops_json(const OpRef& r) {
    if (!r.live()) return "";
    const OpsTruth& o = ops();
    std::string out = ",\"op\":{\"name\":";
    json_string(out, r.name >= 0 ? o.names[r.name] : std::string());
    if (r.device_op >= 0) {
        out += ",\"device_op\":";
        json_string(out, o.names[r.device_op]);
    }
    if (r.launch && r.launch->has_runtime_id) out += ",\"runtime_id\":" + std::to_string(r.launch->runtime_id);
    out += ",\"depth\":" + std::to_string(r.depth) + "}";
    return out;
}

void ops_truth_json(std::string& out) {
    OpsTruth& o = ops();
    char buf[256];
    std::snprintf(buf, sizeof buf, ",\n \"ops_recorded\":%s,\"ops_truncated\":%s,\"ops_too_deep\":%" PRIu64,
                  o.recording ? "true" : "false", o.truncated ? "true" : "false", o.too_deep);
    out += buf;
    out += ",\n \"op_allocs\":[";
    for (std::size_t i = 0; i < o.allocs.size(); ++i) {
        const AllocRecord& a = o.allocs[i];
        std::snprintf(buf, sizeof buf,
                      "%s{\"n\":%" PRIu64 ",\"tid\":%d,\"buffer\":\"%p\",\"device\":%d,\"mesh\":%d,\"type\":\"%s\","
                      "\"address\":%" PRIu64 ",\"size\":%" PRIu64 ",\"hooked\":%s",
                      i ? ",\n  " : "\n  ", a.n, a.tid, a.buffer, a.chip, a.mesh, buffer_type_name(a.type), a.address,
                      a.size, a.hooked ? "true" : "false");
        out += buf;
        out += ops_json(a.op) + "}";
    }
    out += "],\n \"op_layouts\":[";
    for (std::size_t i = 0; i < o.layouts.size(); ++i) {
        const LayoutRecord& l = o.layouts[i];
        std::snprintf(buf, sizeof buf, "%s{\"program\":\"%p\",\"program_id\":%" PRIu64 ",\"tid\":%d",
                      i ? ",\n  " : "\n  ", l.program, l.program_id, l.tid);
        out += buf;
        out += ops_json(l.op) + "}";
    }
    out += "],\n \"op_traces\":[";
    for (std::size_t i = 0; i < o.trace_calls.size(); ++i) {
        const TraceCall& c = o.trace_calls[i];
        std::snprintf(buf, sizeof buf, "%s{\"tid\":%d,\"call\":\"%s\",\"trace\":%u,\"mesh\":%s",
                      i ? ",\n  " : "\n  ", c.tid, c.call, c.trace, c.mesh ? "true" : "false");
        out += buf;
        out += ops_json(c.op) + "}";
    }
    // Leaks per row: what open chips still hold, by the op of its allocation.
    std::map<std::pair<int32_t, int32_t>, std::pair<uint64_t, uint64_t>> leaked;
    for (Device* d : open_devices_locked()) {
        for (int t = 0; t < kNumBufferTypes; ++t) {
            for (const auto& [addr, block] : d->chip_allocator()->blocks(static_cast<BufferType>(t))) {
                auto it = o.owners.find(block.owner);
                if (it == o.owners.end()) continue;
                auto& l = leaked[{it->second.name, it->second.device_op}];
                l.first += 1;
                l.second += block.size;
            }
        }
        for (const auto& [owner, pc] : d->chip_allocator()->per_core()) {
            auto it = o.owners.find(owner);
            if (it == o.owners.end()) continue;
            auto& l = leaked[{it->second.name, it->second.device_op}];
            l.first += 1;
            l.second += pc.size;
        }
    }
    out += "],\n \"ops\":[";
    bool first = true;
    auto name_of = [&](int32_t id) { return id >= 0 ? o.names[id] : std::string(); };
    for (const auto& [key, row] : o.rows) {
        out += first ? "\n  {\"name\":" : ",\n  {\"name\":";
        first = false;
        json_string(out, name_of(key.first));
        if (key.second >= 0) {
            out += ",\"device_op\":";
            json_string(out, name_of(key.second));
        }
        const auto l = leaked.count(key) ? leaked[key] : std::pair<uint64_t, uint64_t>{0, 0};
        std::snprintf(buf, sizeof buf,
                      ",\"calls\":%" PRIu64 ",\"allocs\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"peak_dram_bytes\":%" PRId64
                      ",\"peak_l1_bytes\":%" PRId64 ",\"cb_bytes\":%" PRIu64 ",\"alloc_failures\":%" PRIu64
                      ",\"leaked_buffers\":%" PRIu64 ",\"leaked_bytes\":%" PRIu64 "}",
                      row.calls, row.allocs, row.bytes, row.peak_dram, row.peak_l1, row.cb_bytes, row.failures, l.first,
                      l.second);
        out += buf;
    }
    out += "]";
}

}  // namespace tt::tt_metal::replica

using namespace tt::tt_metal::replica;

extern "C" void tt_replica_ops_record(int on) {
    std::lock_guard<std::mutex> lock(tt::tt_metal::replica::mem_mutex());
    ops().recording = on != 0;
}

extern "C" int tt_replica_op_enter(const char* name, int kind) {
    if (frames().size() >= kMaxFrames || t_overflow > 0) {
        std::lock_guard<std::mutex> lock(tt::tt_metal::replica::mem_mutex());
        ++t_overflow;
        ++ops().too_deep;
        return -1;
    }
    std::lock_guard<std::mutex> lock(tt::tt_metal::replica::mem_mutex());
    const int32_t id = intern(name);
    if (kind == TT_REPLICA_OP_TOP) {
        frames().push_back(Frame{id, false, nullptr});
        ops().rows[{id, -1}].calls += 1;
    } else {
        std::shared_ptr<OpLaunch> launch;
        if (!frames().empty() && frames().back().device && frames().back().name == id) {
            launch = frames().back().launch;  // the same launch, one function further in
        } else {
            launch = std::make_shared<OpLaunch>();
            frames().push_back(Frame{id, true, launch});
            ops().rows[{ops_current().name, id}].calls += 1;
            return static_cast<int>(frames().size());
        }
        frames().push_back(Frame{id, true, std::move(launch)});
    }
    return static_cast<int>(frames().size());
}

extern "C" void tt_replica_op_leave(void) {
    if (t_overflow > 0) {
        --t_overflow;
        return;
    }
    if (!frames().empty()) frames().pop_back();
}
