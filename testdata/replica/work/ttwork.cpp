// libttwork.so: deterministic workloads against the libtt_metal.so replica.
// Entry point: extern "C" int ttwork_main(int argc, char** argv).
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <optional>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tt_metal/replica.hpp"

using namespace tt::tt_metal;
using distributed::MeshBuffer;
using distributed::MeshDevice;
using detail::ProgramImpl;
using BufferPtr = std::shared_ptr<Buffer>;
using MeshBufferPtr = std::shared_ptr<MeshBuffer>;

namespace {

// ---------------------------------------------------------------- helpers

struct Rng {
    uint64_t s;
    explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 0x5851F42D4C957F2Dull) {}
    uint64_t next() {  // splitmix64
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    uint64_t below(uint64_t n) { return n ? next() % n : 0; }
    bool chance(int percent) { return below(100) < static_cast<uint64_t>(percent); }
};

struct Options {
    std::string scenario = "basic";
    std::string truth;
    std::string go_file;
    std::string hold_file;  // after the truth is written: print "holding" and wait for it
    uint64_t seed = 1;
    int threads = -1;  // scenario default
    uint64_t events = 1000000;
    bool leak = false;
    std::string shape = "n150";  // alloc scenario: the chips' shape
    bool uncaught = false;       // alloc scenario: the last OOM is not caught (the process aborts)
    bool open_before_go = false; // alloc scenario: the chips open before the go point
    // alloc scenario: the chips open and hold buffers before the go point; after it, one
    // allocation of each type, then a pause (settle_ms) for a tracer to read the allocators.
    bool alloc_before_go = false;
    bool idle_chip = false;      // alloc scenario: the last chip allocates nothing after the go point
    bool hybrid = false;  // alloc scenario: chips in AllocatorMode::HYBRID, with per-core L1 buffers
    bool mesh = false;    // alloc scenario: a MeshDevice over the chips, its buffers and its OOMs
    // cb_cache scenario: the go point after the program cache is warm (its programs laid out and
    // dispatched, their CBs resident), and a few cache hits at the end (docs/ttmetal.md §12).
    bool cache_before_go = false;
    int settle_ms = 3000;
    std::string window_file;  // windows scenario: wait for PATH.N before marking window N
    bool spike = false;       // windows scenario: one more 32 KiB DRAM buffer in window 1, freed there
};

struct Ctx {
    Options opt;
    bool went = false;
    int threads(int def) const { return opt.threads > 0 ? opt.threads : def; }
    uint64_t seed(uint64_t salt) const { return opt.seed * 1000003ull + salt; }
};

// Objects deliberately never destroyed (--leak). The list itself escapes, so the compiler
// cannot drop the allocations.
std::mutex g_forever_mutex;
std::vector<void*>* g_forever = new std::vector<void*>();

template <class T>
void keep_forever(T object) {
    T* p = new T(std::move(object));
    std::lock_guard<std::mutex> lock(g_forever_mutex);
    g_forever->push_back(p);
}

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "ttwork: check failed: %s\n", what);
    std::fflush(stderr);
    std::abort();
}
#define CHECK(cond)                 \
    do {                            \
        if (!(cond)) fail(#cond);   \
    } while (0)

// Before the traced part: print "ready" on stderr, wait for the go file, then mark the attach
// point in the ground truth.
void go_point(Ctx& ctx) {
    if (ctx.went || ctx.opt.go_file.empty()) return;
    ctx.went = true;
    std::fprintf(stderr, "ready\n");
    std::fflush(stderr);
    while (access(ctx.opt.go_file.c_str(), F_OK) != 0) usleep(5000);
    tt_replica_mark_attach();
}

BufferPtr try_create(IDevice* dev, DeviceAddr size, BufferType type, uint64_t* ooms = nullptr) {
    try {
        return Buffer::create(dev, size, size < 2048 ? size : 2048, type);
    } catch (const std::runtime_error&) {
        if (ooms) ++*ooms;
        return nullptr;
    }
}

MeshBufferPtr try_mesh(MeshDevice* mesh, DeviceAddr size, BufferType type, uint64_t* ooms = nullptr) {
    try {
        return MeshBuffer::create(mesh, size, size < 2048 ? size : 2048, type);
    } catch (const std::runtime_error&) {
        if (ooms) ++*ooms;
        return nullptr;
    }
}

CoreRangeSet cores(std::size_t x0, std::size_t y0, std::size_t x1, std::size_t y1) {
    return CoreRangeSet(CoreRange({x0, y0}, {x1, y1}));
}

std::vector<Device*> open_chips(const std::vector<int>& ids, const AllocatorConfig& cfg = AllocatorConfig{}) {
    std::vector<Device*> v;
    for (int id : ids) v.push_back(CreateDevice(id, cfg));
    return v;
}

std::vector<int> iota_ids(int from, int to) {
    std::vector<int> v;
    for (int i = from; i <= to; ++i) v.push_back(i);
    return v;
}

const BufferType kTypes[] = {BufferType::DRAM, BufferType::L1, BufferType::SYSTEM_MEMORY, BufferType::L1_SMALL,
                             BufferType::TRACE};

// Removes a random element of v (swap with last).
template <class T>
void drop_random(std::vector<T>& v, Rng& rng) {
    if (v.empty()) return;
    std::size_t i = rng.below(v.size());
    std::swap(v[i], v.back());
    v.pop_back();
}

// ---------------------------------------------------------------- scenarios

int scenario_basic(Ctx& ctx) {
    go_point(ctx);
    Rng rng(ctx.seed(1));
    Device* d = CreateDevice(0);
    std::vector<BufferPtr> live;
    const DeviceAddr sizes[] = {32, 100, 2048, 4096, 8192, 1, 12345};
    for (BufferType t : kTypes) {
        for (DeviceAddr s : sizes) live.push_back(Buffer::create(d, s, s < 1024 ? s : 1024, t));
    }
    // Free about a third, in a seeded order.
    for (int i = 0; i < 12; ++i) drop_random(live, rng);
    // Zero-size buffers: no allocation, no event, then destroyed.
    for (BufferType t : {BufferType::DRAM, BufferType::L1, BufferType::TRACE}) {
        BufferPtr z = Buffer::create(d, 0, 32, t);
        CHECK(z->is_allocated());
        CHECK(z->address() == 0);
    }
    BufferPtr zero_kept = Buffer::create(d, 0, 32, BufferType::L1_SMALL);
    // A pre-allocated view of a live buffer: counts nothing, frees nothing.
    BufferPtr src = live.front();
    {
        BufferPtr view = src->view(BufferRegion{0, src->size()});
        CHECK(view->address() == src->address());
        CHECK(!view->owns_data());
    }
    CHECK(src->is_allocated());
    // Explicit deallocate, then the destructor does nothing more.
    BufferPtr e = Buffer::create(d, 640, 64, BufferType::DRAM);
    e->deallocate();
    CHECK(!e->is_allocated());
    e.reset();
    // Reuse of the freed addresses.
    for (int i = 0; i < 10; ++i) {
        live.push_back(Buffer::create(d, 32 * (1 + rng.below(40)), 32, kTypes[rng.below(5)]));
    }
    for (int i = 0; i < 8; ++i) drop_random(live, rng);
    zero_kept.reset();
    if (ctx.opt.leak) {
        keep_forever(Buffer::create(d, 4096, 1024, BufferType::DRAM));
        keep_forever(Buffer::create(d, 2048, 1024, BufferType::L1));
        keep_forever(Buffer::create(d, 1 << 16, 4096, BufferType::TRACE));
        keep_forever(live.back());  // one of the random ones too
    }
    live.clear();
    std::printf("basic: done\n");
    return 0;
}

int scenario_threads(Ctx& ctx) {
    go_point(ctx);
    AllocatorConfig small;
    small.capacity[0] = 64 << 10;  // DRAM
    small.capacity[1] = 32 << 10;  // L1
    std::vector<Device*> chips = open_chips({0, 1}, small);
    const int n = ctx.threads(4);
    const int ops = 20000;
    std::atomic<uint64_t> allocs{0}, ooms{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < n; ++t) {
        pool.emplace_back([&, t] {
            Rng rng(ctx.seed(100 + t));
            std::vector<BufferPtr> live;
            uint64_t my_ooms = 0, my_allocs = 0;
            for (int i = 0; i < ops; ++i) {
                if (live.empty() || (live.size() < 48 && rng.chance(55))) {
                    Device* dev = chips[rng.below(2)];
                    BufferType type = rng.chance(50) ? BufferType::DRAM : BufferType::L1;
                    BufferPtr b = try_create(dev, 32 * (1 + rng.below(64)), type, &my_ooms);
                    if (b) {
                        live.push_back(std::move(b));
                        ++my_allocs;
                    }
                } else {
                    drop_random(live, rng);
                }
            }
            if (ctx.opt.leak && !live.empty()) keep_forever(live.front());
            live.clear();
            allocs += my_allocs;
            ooms += my_ooms;
        });
    }
    for (auto& th : pool) th.join();
    std::printf("threads: %d threads, %" PRIu64 " allocations, %" PRIu64 " OOM caught\n", n, allocs.load(), ooms.load());
    return 0;
}

int scenario_oom(Ctx& ctx) {
    go_point(ctx);
    AllocatorConfig cfg;
    cfg.capacity[0] = 1 << 20;
    Device* d = CreateDevice(0, cfg);
    const DeviceAddr cap = d->allocator_config().capacity[0];
    const DeviceAddr chunk = cap / 10 / 32 * 32;
    std::vector<BufferPtr> live;
    bool caught = false;
    while (live.size() < 100) {
        try {
            live.push_back(Buffer::create(d, chunk, 2048, BufferType::DRAM));
        } catch (const std::runtime_error& e) {
            std::printf("oom: caught: %s\n", e.what());
            caught = true;
            break;
        }
    }
    CHECK(caught);
    for (std::size_t i = 1; i < live.size(); i += 2) live[i].reset();
    live.push_back(Buffer::create(d, chunk, 2048, BufferType::DRAM));  // into a hole
    live.push_back(Buffer::create(d, chunk / 2, 2048, BufferType::DRAM));
    caught = false;
    try {
        live.push_back(Buffer::create(d, 3 * chunk, 2048, BufferType::DRAM));  // fragmented: no room
    } catch (const std::runtime_error& e) {
        std::printf("oom: caught: %s\n", e.what());
        caught = true;
    }
    CHECK(caught);
    // L1 too.
    caught = false;
    try {
        Buffer::create(d, d->allocator_config().capacity[1] + 32, 2048, BufferType::L1);
    } catch (const std::runtime_error& e) {
        std::printf("oom: caught: %s\n", e.what());
        caught = true;
    }
    CHECK(caught);
    live.push_back(Buffer::create(d, chunk / 4, 2048, BufferType::DRAM));
    if (ctx.opt.leak) {
        for (auto& b : live) {
            if (b) {
                keep_forever(b);
                break;
            }
        }
    }
    live.clear();
    std::printf("oom: done\n");
    return 0;
}

int scenario_burst(Ctx& ctx) {
    go_point(ctx);
    Device* d = CreateDevice(0);
    // --threads 0: the calling thread allocates (from Python, its frames are the stack's).
    const bool here = ctx.opt.threads == 0;
    const int n = here ? 1 : ctx.threads(2);
    const uint64_t pairs = (ctx.opt.events + 1) / 2;
    auto t0 = std::chrono::steady_clock::now();
    auto work = [&](int t, uint64_t mine) {
        for (uint64_t i = 0; i < mine; ++i) {
            BufferPtr b = Buffer::create(d, 32, 32, (i & 1) ? BufferType::L1 : BufferType::DRAM);
            b.reset();
        }
        if (ctx.opt.leak) keep_forever(Buffer::create(d, 64 + 32 * t, 32, BufferType::DRAM));
    };
    std::vector<std::thread> pool;
    for (int t = 0; t < n && !here; ++t)
        pool.emplace_back(work, t, pairs / n + (static_cast<uint64_t>(t) < pairs % n ? 1 : 0));
    if (here) work(0, pairs);
    for (auto& th : pool) th.join();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("burst: %" PRIu64 " events on %d threads in %.3f s\n", pairs * 2, n, secs);
    return 0;
}

// hold: --events N tracked events = N/2 buffers, all live at once, then all freed (the
// tracer's memory with many live buffers). Spread over kHoldChips chips and three buffer types,
// one bank after the other, because the replica's first-fit allocator walks a bank's blocks on
// every allocation.
int scenario_hold(Ctx& ctx) {
    go_point(ctx);
    constexpr int kHoldChips = 256;
    const BufferType types[] = {BufferType::DRAM, BufferType::SYSTEM_MEMORY, BufferType::TRACE};
    std::vector<Device*> chips = open_chips(iota_ids(0, kHoldChips - 1));
    const int n = ctx.threads(2);
    const uint64_t total = ctx.opt.events / 2;
    const uint64_t banks = kHoldChips * 3;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::vector<BufferPtr>> held(n);
    std::vector<std::thread> pool;
    for (int t = 0; t < n; ++t) {
        pool.emplace_back([&, t] {
            // Bank k gets total/banks buffers (the first total%banks one more); thread t fills
            // banks t, t+n, ...
            for (uint64_t k = t; k < banks; k += n) {
                uint64_t count = total / banks + (k < total % banks ? 1 : 0);
                Device* d = chips[k / 3];
                for (uint64_t i = 0; i < count; ++i) held[t].push_back(Buffer::create(d, 32, 32, types[k % 3]));
            }
        });
    }
    for (auto& th : pool) th.join();
    pool.clear();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("hold: %" PRIu64 " buffers live on %d chips (allocated in %.3f s)\n", total, kHoldChips, secs);
    std::fflush(stdout);
    if (ctx.opt.leak) {
        for (auto& v : held) keep_forever(std::move(v));
        return 0;
    }
    for (int t = 0; t < n; ++t) pool.emplace_back([&, t] { held[t].clear(); });
    for (auto& th : pool) th.join();
    std::printf("hold: freed\n");
    return 0;
}

int scenario_mesh(Ctx& ctx) {
    go_point(ctx);
    Rng rng(ctx.seed(2));
    std::vector<Device*> chips = open_chips(iota_ids(0, 7));  // T3K: 2x4
    Device* c0 = chips[0];
    // Ordinary buffers on chip 0 first: the mesh allocator must find an address free everywhere.
    std::vector<BufferPtr> chip_bufs;
    chip_bufs.push_back(Buffer::create(c0, 4096, 1024, BufferType::DRAM));
    chip_bufs.push_back(Buffer::create(c0, 2048, 1024, BufferType::L1));
    auto mesh = MeshDevice::create(chips);
    std::printf("mesh: mesh id %d over 8 chips\n", mesh->id());
    std::vector<MeshBufferPtr> mbs;
    for (int i = 0; i < 24; ++i) {
        BufferType t = rng.chance(50) ? BufferType::DRAM : BufferType::L1;
        mbs.push_back(MeshBuffer::create(mesh.get(), 32 * (1 + rng.below(256)), 1024, t));
        if (rng.chance(30)) drop_random(mbs, rng);
        if (rng.chance(25)) chip_bufs.push_back(Buffer::create(c0, 32 * (1 + rng.below(64)), 32, t));
        if (rng.chance(15)) drop_random(chip_bufs, rng);
    }
    for (const auto& mb : mbs) {
        for (const auto& v : mb->get_device_buffers()) CHECK(v->address() == mb->address());
    }
    auto sub = mesh->create_submesh({chips[4], chips[5], chips[6], chips[7]});
    std::printf("mesh: sub-mesh id %d over chips 4..7\n", sub->id());
    std::vector<MeshBufferPtr> sbs;
    for (int i = 0; i < 10; ++i) {
        sbs.push_back(MeshBuffer::create(sub.get(), 32 * (1 + rng.below(128)), 512,
                                         rng.chance(50) ? BufferType::DRAM : BufferType::L1));
        if (rng.chance(30)) drop_random(sbs, rng);
    }
    // A mesh buffer that does not fit: caught, nothing changes.
    uint64_t ooms = 0;
    CHECK(!try_mesh(mesh.get(), chips[0]->allocator_config().capacity[1] * 2, BufferType::L1, &ooms));
    CHECK(ooms == 1);
    if (ctx.opt.leak) {
        if (!mbs.empty()) keep_forever(mbs.front());
        if (!sbs.empty()) keep_forever(sbs.front());
        keep_forever(Buffer::create(c0, 1024, 1024, BufferType::DRAM));
        keep_forever(MeshBuffer::create(mesh.get(), 8192, 1024, BufferType::L1_SMALL));
    }
    mbs.clear();
    sbs.clear();
    chip_bufs.clear();
    std::printf("mesh: done\n");
    return 0;
}

int scenario_galaxy(Ctx& ctx) {
    go_point(ctx);
    Rng rng(ctx.seed(3));
    std::vector<Device*> chips = open_chips(iota_ids(0, 31));
    auto mesh = MeshDevice::create(chips);
    std::printf("galaxy: mesh id %d over 32 chips\n", mesh->id());
    std::vector<MeshBufferPtr> mbs;
    std::vector<BufferPtr> bufs;
    for (int i = 0; i < 16; ++i) {
        mbs.push_back(MeshBuffer::create(mesh.get(), 1024 * (1 + rng.below(16)), 1024,
                                         rng.chance(60) ? BufferType::DRAM : BufferType::L1));
        for (int k = 0; k < 4; ++k) {
            bufs.push_back(Buffer::create(chips[rng.below(32)], 32 * (1 + rng.below(100)), 32,
                                          rng.chance(50) ? BufferType::DRAM : BufferType::L1));
        }
        if (rng.chance(40)) drop_random(mbs, rng);
        for (int k = 0; k < 2; ++k) drop_random(bufs, rng);
    }
    if (ctx.opt.leak) {
        if (!mbs.empty()) keep_forever(mbs.back());
        if (!bufs.empty()) keep_forever(bufs.front());
        keep_forever(Buffer::create(chips[31], 4096, 1024, BufferType::TRACE));
    }
    mbs.clear();
    bufs.clear();
    std::printf("galaxy: done\n");
    return 0;
}

int scenario_sparse(Ctx& ctx) {
    go_point(ctx);
    Rng rng(ctx.seed(4));
    const std::vector<int> ids = {0, 2, 7, 15, 31, 35, 63, 100};
    std::vector<Device*> chips = open_chips(ids);
    auto pick = [&](int id) { return chips[std::find(ids.begin(), ids.end(), id) - ids.begin()]; };
    auto mesh = MeshDevice::create({pick(7), pick(15), pick(35), pick(100)});
    std::printf("sparse: mesh id %d over chips 7,15,35,100\n", mesh->id());
    std::vector<BufferPtr> bufs;
    std::vector<MeshBufferPtr> mbs;
    for (Device* c : chips) {
        for (BufferType t : {BufferType::DRAM, BufferType::L1, BufferType::L1_SMALL}) {
            bufs.push_back(Buffer::create(c, 32 * (1 + rng.below(200)), 32, t));
        }
    }
    for (int i = 0; i < 12; ++i) {
        mbs.push_back(MeshBuffer::create(mesh.get(), 64 * (1 + rng.below(64)), 64,
                                         rng.chance(50) ? BufferType::DRAM : BufferType::L1));
        if (rng.chance(40)) drop_random(mbs, rng);
        drop_random(bufs, rng);
    }
    if (ctx.opt.leak) {
        keep_forever(Buffer::create(pick(100), 4096, 1024, BufferType::DRAM));
        keep_forever(Buffer::create(pick(63), 2048, 1024, BufferType::L1));
        keep_forever(Buffer::create(pick(35), 512, 512, BufferType::DRAM));
        if (!mbs.empty()) keep_forever(mbs.front());
    }
    bufs.clear();
    mbs.clear();
    std::printf("sparse: done\n");
    return 0;
}

// Programs with CBs, 2026 or legacy behaviour.
int run_cb(Ctx& ctx, bool legacy) {
    const char* name = legacy ? "cb_legacy" : "cb";
    go_point(ctx);
    set_legacy_cb_behaviour(legacy);
    Rng rng(ctx.seed(legacy ? 6 : 5));
    Device* c0 = CreateDevice(0);
    Device* c1 = CreateDevice(1);
    auto mesh = MeshDevice::create(open_chips({2, 3, 4, 5}));
    std::printf("%s: mesh id %d over chips 2..5\n", name, mesh->id());
    // A mesh buffer first (legacy: the mesh's chips are learned from its views), also the
    // backing of a globally allocated CB.
    MeshBufferPtr gmesh = MeshBuffer::create(mesh.get(), 32768, 1024, BufferType::L1);
    BufferPtr gchip = Buffer::create(c0, 65536, 2048, BufferType::L1);

    auto p1 = std::make_unique<ProgramImpl>();  // chip 0: 2 local + 1 global
    p1->add_circular_buffer(cores(0, 0, 7, 7), 4096);
    p1->add_circular_buffer(cores(0, 0, 0, 3), 2048);
    p1->add_circular_buffer(cores(0, 0, 7, 7), 65536, true, gchip);
    p1->allocate_circular_buffers(c0);
    p1->allocate_circular_buffers(c0);  // cached: no new track calls
    CHECK(p1->circular_buffer_address(2) == gchip->address());

    auto p2 = std::make_unique<ProgramImpl>();  // mesh: 2 local + 1 global
    p2->add_circular_buffer(cores(0, 0, 3, 3), 8192);
    p2->add_circular_buffer(cores(1, 1, 2, 2), 1024);
    p2->add_circular_buffer(cores(0, 0, 3, 3), 32768, true, gmesh->get_backing_buffer());
    p2->allocate_circular_buffers(mesh.get());
    p2->allocate_circular_buffers(mesh.get());  // cached

    auto p3 = std::make_unique<ProgramImpl>();  // chip 1: add a CB after the layout, lay out again
    p3->add_circular_buffer(cores(0, 0, 1, 1), 3072);
    p3->add_circular_buffer(cores(0, 0, 1, 1), 96);
    p3->allocate_circular_buffers(c1);
    p3->add_circular_buffer(cores(2, 2, 2, 2), 512);
    p3->allocate_circular_buffers(c1);  // all three again

    auto p4 = std::make_unique<ProgramImpl>();  // chip 0
    p4->add_circular_buffer(cores(0, 0, 0, 0), 16384 + 32 * rng.below(16));
    p4->allocate_circular_buffers(c0);

    auto p5 = std::make_unique<ProgramImpl>();  // mesh, re-laid out after a CB is added
    p5->add_circular_buffer(cores(0, 0, 0, 0), 640);
    p5->allocate_circular_buffers(mesh.get());
    p5->add_circular_buffer(cores(0, 0, 0, 0), 1280);
    p5->allocate_circular_buffers(mesh.get());

    auto p6 = std::make_unique<ProgramImpl>();  // chip 1: explicit teardown, then laid out again
    p6->add_circular_buffer(cores(0, 0, 3, 0), 2000);
    p6->allocate_circular_buffers(c1);
    p6->deallocate_circular_buffers();
    p6->allocate_circular_buffers(c1);

    // Teardown in various orders while others stay alive.
    p4.reset();
    p2.reset();
    p1->deallocate_circular_buffers();  // explicit, then the destructor finds nothing more (2026)
    p1.reset();
    p6.reset();
    if (ctx.opt.leak) {
        keep_forever(std::move(p3));
        keep_forever(std::move(p5));
        keep_forever(gmesh);
    } else {
        p5.reset();
        p3.reset();
    }
    gmesh.reset();
    gchip.reset();
    set_legacy_cb_behaviour(false);
    std::printf("%s: done\n", name);
    return 0;
}

int scenario_cb(Ctx& ctx) { return run_cb(ctx, false); }
int scenario_cb_legacy(Ctx& ctx) { return run_cb(ctx, true); }

int scenario_close(Ctx& ctx) {
    go_point(ctx);
    Device* c0 = CreateDevice(0);
    Device* c1 = CreateDevice(1);
    Device* c4 = CreateDevice(4);
    auto mesh = MeshDevice::create(open_chips({2, 3}));
    std::printf("close: mesh id %d over chips 2,3\n", mesh->id());
    Device* c2 = mesh->get_devices()[0];

    BufferPtr b1a = Buffer::create(c1, 8192, 1024, BufferType::DRAM);
    BufferPtr b1b = Buffer::create(c1, 4096, 1024, BufferType::L1);
    auto p1 = std::make_unique<ProgramImpl>();
    p1->add_circular_buffer(cores(0, 0, 1, 1), 4096);
    p1->allocate_circular_buffers(c1);
    MeshBufferPtr mb1 = MeshBuffer::create(mesh.get(), 16384, 1024, BufferType::DRAM);
    MeshBufferPtr mb2 = MeshBuffer::create(mesh.get(), 2048, 1024, BufferType::L1);
    BufferPtr b2 = Buffer::create(c2, 1024, 1024, BufferType::L1);
    auto pm = std::make_unique<ProgramImpl>();
    pm->add_circular_buffer(cores(0, 0, 0, 0), 8192);
    pm->add_circular_buffer(cores(0, 0, 0, 0), 1024, true, mb2->get_backing_buffer());
    pm->allocate_circular_buffers(mesh.get());
    BufferPtr b0 = Buffer::create(c0, 4096, 1024, BufferType::DRAM);
    BufferPtr b4 = Buffer::create(c4, 4096, 1024, BufferType::L1);

    c1->close();
    mesh->close();
    CHECK(!c1->is_initialized() && !c2->is_initialized() && !mesh->is_initialized());
    CHECK(c0->is_initialized() && c4->is_initialized());

    // Destroy what lived on the closed chips: no free events.
    b1a.reset();
    b1b->deallocate();
    b1b.reset();
    b2.reset();
    mb1.reset();          // mark_as_deallocated on backing + views
    mb2->deallocate();    // same, explicitly
    pm.reset();           // closed chips: nothing to release
    mb2.reset();
    p1->deallocate_circular_buffers();
    p1.reset();

    // Other chips are still active.
    std::vector<BufferPtr> more;
    for (int i = 0; i < 6; ++i) more.push_back(Buffer::create(i % 2 ? c0 : c4, 1024 * (i + 1), 1024, BufferType::DRAM));
    auto p0 = std::make_unique<ProgramImpl>();
    p0->add_circular_buffer(cores(0, 0, 0, 0), 2048);
    p0->allocate_circular_buffers(c0);
    p0.reset();
    more.erase(more.begin(), more.begin() + 3);
    if (ctx.opt.leak) {
        keep_forever(b0);
        keep_forever(b4);
        keep_forever(more.back());
    }
    b0.reset();
    b4.reset();
    more.clear();
    std::printf("close: done\n");
    return 0;
}

int scenario_capture(Ctx& ctx) {
    go_point(ctx);
    Device* c0 = CreateDevice(0);
    Device* c1 = CreateDevice(1);
    auto mesh = MeshDevice::create({c0, c1});
    GraphTracker& tracker = GraphTracker::instance();
    BufferPtr n1 = Buffer::create(c0, 4096, 1024, BufferType::DRAM);
    BufferPtr n2 = Buffer::create(c0, 2048, 1024, BufferType::L1);

    tracker.begin_capture();
    BufferPtr h1 = Buffer::create(c0, 8192, 1024, BufferType::DRAM);
    BufferPtr h2 = Buffer::create(c1, 1024, 1024, BufferType::L1);
    MeshBufferPtr h3 = MeshBuffer::create(mesh.get(), 4096, 1024, BufferType::DRAM);
    BufferPtr h4 = Buffer::create(c0, 0, 32, BufferType::DRAM);
    BufferPtr h5 = Buffer::create(c0, 640, 64, BufferType::L1);
    CHECK(h1->hooked_allocation() && h1->address() == 0);
    CHECK(h3->address() == 0);
    h1.reset();  // freed during the capture
    h4.reset();
    tracker.end_capture();
    h2.reset();  // after it
    h3.reset();

    BufferPtr n3 = Buffer::create(c0, 4096, 1024, BufferType::DRAM);
    CHECK(!n3->hooked_allocation());
    BufferPtr n4 = Buffer::create(c1, 4096, 1024, BufferType::DRAM);
    n2.reset();
    if (ctx.opt.leak) {
        keep_forever(n1);
        keep_forever(h5);  // a hooked buffer: holds no memory, not a leak
        keep_forever(n4);
    }
    n1.reset();
    n3.reset();
    n4.reset();
    h5.reset();
    std::printf("capture: done\n");
    return 0;
}

int scenario_sametype(Ctx& ctx) {
    go_point(ctx);
    Device* d = CreateDevice(40);  // a chip no other scenario uses: its allocators start empty
    BufferPtr dram = Buffer::create(d, 4096, 1024, BufferType::DRAM);
    BufferPtr l1 = Buffer::create(d, 4096, 1024, BufferType::L1);
    CHECK(dram->address() == l1->address());
    std::printf("sametype: DRAM and L1 both at 0x%" PRIx64 " on chip 40\n", dram->address());
    BufferPtr small = Buffer::create(d, 1024, 1024, BufferType::L1_SMALL);
    CHECK(small->address() == l1->address());
    dram.reset();  // the L1 buffer at the same address stays
    CHECK(l1->is_allocated());
    BufferPtr dram2 = Buffer::create(d, 2048, 1024, BufferType::DRAM);
    CHECK(dram2->address() == l1->address());
    l1.reset();
    BufferPtr l1b = Buffer::create(d, 512, 512, BufferType::L1);
    CHECK(l1b->address() == dram2->address());
    if (ctx.opt.leak) {
        keep_forever(dram2);
        keep_forever(l1b);
    }
    dram2.reset();
    l1b.reset();
    small.reset();
    std::printf("sametype: done\n");
    return 0;
}

// CB regions against L1 buffers (upstream's "circular buffers ... clash with L1 buffers"): a
// program whose CBs reach past the lowest L1 buffer throws, caught here; the same program after
// the low buffers were freed does not; a mesh L1 buffer is in the way on every chip of its mesh.
// L1_SMALL and DRAM buffers at the same addresses are never in the way.
bool clashes(ProgramImpl& p, const IDevice* device) {
    try {
        p.allocate_circular_buffers(device);
    } catch (const std::runtime_error& e) {
        std::printf("l1: caught: %s\n", e.what());
        return true;
    }
    return false;
}


// The allocator's view (issue 22): chips shaped like a Wormhole n150 / n300 / Galaxy or a
// Blackhole (--shape), interleaved and sharded buffers of every type, then out-of-memory by
// a request larger than a bank (DRAM), by exhaustion (L1 filled with equal chunks) and by
// fragmentation (every other chunk freed, a request of 1.5 chunks), each caught; with
// --uncaught the last one is not caught and the process aborts (the truth is written by the
// terminate handler first). Sizes come from the chips' own allocators, not from tables.
const char* g_terminate_truth = nullptr;

void write_truth_and_abort() {
    if (g_terminate_truth != nullptr) tt_replica_write_truth(g_terminate_truth);
    std::fflush(stdout);
    std::abort();
}

bool caught_oom(const char* what, const std::function<void()>& fn) {
    try {
        fn();
    } catch (const std::runtime_error& e) {
        std::printf("alloc: %s: caught: %s\n", what, e.what());
        return std::strstr(e.what(), "Out of Memory: Not enough space to allocate") != nullptr;
    }
    return false;
}

int scenario_alloc(Ctx& ctx) {
    std::optional<ChipShape> shape = chip_shape_from_name(ctx.opt.shape);
    if (!shape || *shape == ChipShape::Flat) {
        std::fprintf(stderr, "ttwork: --shape must be n150, n300, galaxy or blackhole\n");
        return 2;
    }
    const int nchips = *shape == ChipShape::N300 ? 2 : *shape == ChipShape::Galaxy ? 32 : 1;
    std::vector<int> ids;
    for (int i = 0; i < nchips; ++i) ids.push_back(i);
    AllocatorConfig cfg = AllocatorConfig::shaped(*shape);
    cfg.hybrid = ctx.opt.hybrid;
    const bool before = ctx.opt.open_before_go || ctx.opt.alloc_before_go;
    if (!before) go_point(ctx);
    std::vector<Device*> chips = open_chips(ids, cfg);
    Device* d = chips[0];
    const ChipAllocator* a = d->chip_allocator();
    const DeviceAddr page = 2048;
    // Held before the go point: a tracer attached then knows nothing of them.
    std::vector<BufferPtr> pre;
    if (ctx.opt.alloc_before_go) {
        for (int i = 0; i < 5; ++i) pre.push_back(Buffer::create(d, (8 + 4 * i) * page * 12, page, BufferType::DRAM));
        pre[1].reset();  // a hole: the free list the tracer reads is fragmented
        pre[3].reset();
        pre.push_back(Buffer::create(d, 64 * 1024, page, BufferType::TRACE));
        pre.push_back(Buffer::create(d, 200 * page, page, BufferType::L1));
        pre.push_back(Buffer::create(d, 40 * page, page, BufferType::L1));
        pre.push_back(Buffer::create(d, 8 * 1024, 1024, BufferType::L1_SMALL,
                                     BufferShardingArgs{TensorMemoryLayout::HEIGHT_SHARDED, 4}));
        for (std::size_t i = 1; i < chips.size(); ++i) {
            pre.push_back(Buffer::create(chips[i], (3 + i) * 16 * page, page, BufferType::DRAM));
        }
    }
    if (before) go_point(ctx);
    std::vector<BufferPtr> keep;

    // Interleaved buffers of every type; a page size that is not a multiple of the alignment.
    keep.push_back(Buffer::create(d, 3 << 20, page, BufferType::DRAM));
    keep.push_back(Buffer::create(d, 1000 * 77, 1000, BufferType::DRAM));
    keep.push_back(Buffer::create(d, 64 * page, page, BufferType::DRAM, BufferShardingArgs{}, false));  // top-down DRAM
    keep.push_back(Buffer::create(d, 1 << 20, page, BufferType::TRACE));
    keep.push_back(Buffer::create(d, 96 * page, page, BufferType::L1));
    // Sharded: 8 shard cores, 25 pages (padded to 32); L1_SMALL is sharded only.
    keep.push_back(Buffer::create(d, 25 * page, page, BufferType::L1,
                                  BufferShardingArgs{TensorMemoryLayout::HEIGHT_SHARDED, 8}));
    keep.push_back(Buffer::create(d, 4 * 1024, 1024, BufferType::L1_SMALL,
                                  BufferShardingArgs{TensorMemoryLayout::HEIGHT_SHARDED, 4}));
    // One buffer on every other chip (but the last with --idle-chip).
    for (std::size_t i = 1; i < chips.size(); ++i) {
        if (ctx.opt.idle_chip && i + 1 == chips.size()) continue;
        keep.push_back(Buffer::create(chips[i], (1 + i) * 12 * page, page, BufferType::DRAM));
    }
    if (ctx.opt.alloc_before_go) {
        // Every chip and type allocated once since the go point: let a tracer read them.
        usleep(static_cast<useconds_t>(ctx.opt.settle_ms) * 1000);
        // Frees of buffers a late tracer never saw allocated; L1 must be empty again below.
        pre[0].reset();
        for (auto& b : pre) {
            if (b && (b->buffer_type() == BufferType::L1 || b->buffer_type() == BufferType::L1_SMALL)) b.reset();
        }
    }
    // Freed ones, so the free lists merge neighbours.
    BufferPtr t1 = Buffer::create(d, 24 * page, page, BufferType::DRAM);
    BufferPtr t2 = Buffer::create(d, 24 * page, page, BufferType::DRAM);
    BufferPtr t3 = Buffer::create(d, 24 * page, page, BufferType::DRAM);
    t1.reset();
    t3.reset();
    t2.reset();

    // Larger than a bank: one page more per bank than a DRAM bank holds.
    const BankManager& dram = a->bank(BufferType::DRAM);
    const DeviceAddr too_big = (dram.bank_size() / page + 1) * page * dram.num_banks();
    CHECK(caught_oom("larger than a bank", [&] { Buffer::create(d, too_big, page, BufferType::DRAM); }));

    // Exhaustion: L1 in chunks of a fifth of a bank (top-down).
    const BankManager& l1 = a->bank(BufferType::L1);
    const DeviceAddr chunk_pages = l1.bank_size() / 5 / page;
    const DeviceAddr chunk = chunk_pages * page * l1.num_banks();
    // The 96-page and sharded L1 buffers above take some room: free them first.
    keep[4].reset();
    keep[5].reset();
    std::vector<BufferPtr> chunks;
    for (int i = 0; i < 5; ++i) chunks.push_back(Buffer::create(d, chunk, page, BufferType::L1));
    CHECK(caught_oom("exhausted", [&] { Buffer::create(d, chunk, page, BufferType::L1); }));

    // Fragmentation: two chunks freed apart; 1.5 chunks fits in the free total, not in a block.
    chunks[1].reset();
    chunks[3].reset();
    const DeviceAddr one_and_half = (chunk_pages + chunk_pages / 2) * page * l1.num_banks();
    if (ctx.opt.uncaught) {
        g_terminate_truth = ctx.opt.truth.empty() ? nullptr : ctx.opt.truth.c_str();
        std::set_terminate(write_truth_and_abort);
        std::printf("alloc: fragmented: not caught\n");
        std::fflush(stdout);
        [&]() noexcept { Buffer::create(d, one_and_half, page, BufferType::L1); }();
    }
    CHECK(caught_oom("fragmented", [&] { Buffer::create(d, one_and_half, page, BufferType::L1); }));
    // The process goes on after its OOMs: a chunk still fits.
    chunks[1] = Buffer::create(d, chunk, page, BufferType::L1);

    if (ctx.opt.hybrid) {
        // Per-core L1 buffers (one allocate_buffer call per shard core, each its own address),
        // then a lockstep one, which avoids their ranges; one per-core buffer is freed.
        using experimental::per_core_allocation::create_per_core_buffer;
        BufferPtr pc1 = create_per_core_buffer(d, 16 * page, page, 8);
        BufferPtr pc2 = create_per_core_buffer(d, 8 * page, page, 4);
        keep.push_back(Buffer::create(d, 64 * page * l1.num_banks() / 64, page, BufferType::L1));
        pc1.reset();
        keep.push_back(pc2);
        if (ctx.opt.leak) keep_forever(pc2);
    }
    if (ctx.opt.mesh) {
        // A MeshDevice over the chips: its own allocator (the chips' never hold its buffers),
        // buffers of every type, then its own OOMs as the chip's above.
        auto mesh = MeshDevice::create(chips);
        const BankManager& ml1 = mesh->mesh_allocator()->bank(BufferType::L1);
        std::vector<std::shared_ptr<MeshBuffer>> mk;
        mk.push_back(MeshBuffer::create(mesh.get(), 5 << 20, page, BufferType::DRAM));
        mk.push_back(MeshBuffer::create(mesh.get(), 40 * page, page, BufferType::DRAM));
        mk.push_back(MeshBuffer::create(mesh.get(), 1 << 19, page, BufferType::TRACE));
        mk.push_back(MeshBuffer::create(mesh.get(), 2 * 1024 * ml1.num_banks(), 1024, BufferType::L1_SMALL));
        mk[1].reset();  // a hole in the mesh's DRAM list
        keep.push_back(Buffer::create(d, 16 * page, page, BufferType::DRAM));  // the chip's own, meanwhile
        CHECK(caught_oom("mesh larger than a bank", [&] {
            const BankManager& md = mesh->mesh_allocator()->bank(BufferType::DRAM);
            MeshBuffer::create(mesh.get(), (md.bank_size() / page + 1) * page * md.num_banks(), page, BufferType::DRAM);
        }));
        const DeviceAddr mchunk_pages = ml1.bank_size() / 5 / page;
        const DeviceAddr mchunk = mchunk_pages * page * ml1.num_banks();
        std::vector<std::shared_ptr<MeshBuffer>> mchunks;
        for (int i = 0; i < 5; ++i) mchunks.push_back(MeshBuffer::create(mesh.get(), mchunk, page, BufferType::L1));
        CHECK(caught_oom("mesh exhausted", [&] { MeshBuffer::create(mesh.get(), mchunk, page, BufferType::L1); }));
        mchunks[1].reset();
        mchunks[3].reset();
        CHECK(caught_oom("mesh fragmented", [&] {
            MeshBuffer::create(mesh.get(), (mchunk_pages + mchunk_pages / 2) * page * ml1.num_banks(), page, BufferType::L1);
        }));
        mchunks[1] = MeshBuffer::create(mesh.get(), mchunk, page, BufferType::L1);
        if (ctx.opt.leak) {
            keep_forever(mk[0]);
            keep_forever(mchunks[0]);
        }
        // The mesh stays open (MeshDevices live for the process): the truth gives its allocator.
    }
    if (ctx.opt.leak) {
        keep_forever(keep[0]);
        keep_forever(chunks[0]);
    }
    chunks.clear();
    keep.clear();
    pre.clear();  // frees of buffers a late tracer never saw allocated
    std::printf("alloc: done (%s, %d chips)\n", chip_shape_name(*shape), nchips);
    return 0;
}

int scenario_l1(Ctx& ctx) {
    go_point(ctx);
    Device* d = CreateDevice(50);  // chips no other scenario uses: their allocators start empty
    BufferPtr a = Buffer::create(d, 8192, 2048, BufferType::L1);
    BufferPtr b = Buffer::create(d, 8192, 2048, BufferType::L1);
    BufferPtr c = Buffer::create(d, 8192, 2048, BufferType::L1);
    BufferPtr small = Buffer::create(d, 8192, 2048, BufferType::L1_SMALL);
    BufferPtr dram = Buffer::create(d, 65536, 2048, BufferType::DRAM);
    CHECK(small->address() == a->address() && dram->address() == a->address());
    CHECK(b->address() == a->address() + 8192 && c->address() == b->address() + 8192);

    // CBs of 32 KiB + 40 KiB from 0x1000 end 8 KiB above b's start: a and b are in the way.
    auto p1 = std::make_unique<ProgramImpl>();
    p1->add_circular_buffer(cores(0, 0, 7, 7), 32768);
    p1->add_circular_buffer(cores(0, 0, 7, 7), 40960);
    CHECK(clashes(*p1, d));
    CHECK(p1->circular_buffer_address(1) + 40960 > b->address());
    CHECK(p1->circular_buffer_address(1) + 40960 <= c->address());
    p1.reset();

    // The low buffers freed before the program runs: no clash.
    a.reset();
    b.reset();
    auto p2 = std::make_unique<ProgramImpl>();
    p2->add_circular_buffer(cores(0, 0, 7, 7), 32768);
    p2->add_circular_buffer(cores(0, 0, 7, 7), 40960);
    CHECK(!clashes(*p2, d));
    p2.reset();

    // A mesh L1 buffer sits at the same address on both chips: the program clashes on each.
    auto mesh = MeshDevice::create(open_chips({51, 52}));
    MeshBufferPtr mb = MeshBuffer::create(mesh.get(), 4096, 1024, BufferType::L1);
    auto p3 = std::make_unique<ProgramImpl>();
    p3->add_circular_buffer(cores(0, 0, 3, 3), 65536);
    p3->add_circular_buffer(cores(0, 0, 3, 3), 4096, true, mb->get_backing_buffer());  // global: no region
    CHECK(clashes(*p3, mesh.get()));
    p3.reset();
    if (ctx.opt.leak) {
        keep_forever(c);
        keep_forever(mb);
    }
    c.reset();
    small.reset();
    dram.reset();
    mb.reset();
    std::printf("l1: done\n");
    return 0;
}

int scenario_midrun(Ctx& ctx) {
    Rng rng(ctx.seed(7));
    Device* d = CreateDevice(0);
    std::vector<BufferPtr> pre;
    uint64_t pre_bytes = 0;
    for (int i = 0; i < 40; ++i) {
        DeviceAddr size = 32 * (1 + i);
        pre.push_back(Buffer::create(d, size, 32, kTypes[i % 5]));
        pre_bytes += size;
    }
    std::printf("midrun: %zu buffers (%" PRIu64 " B) allocated before the go point\n", pre.size(), pre_bytes);
    std::fflush(stdout);
    go_point(ctx);
    while (!pre.empty()) drop_random(pre, rng);
    std::vector<BufferPtr> live;
    for (int i = 0; i < 60; ++i) {
        live.push_back(Buffer::create(d, 32 * (1 + rng.below(50)), 32, kTypes[rng.below(5)]));
        if (rng.chance(50)) drop_random(live, rng);
    }
    if (ctx.opt.leak && !live.empty()) {
        keep_forever(live.front());
        keep_forever(live.back());
    }
    live.clear();
    std::printf("midrun: done\n");
    return 0;
}

int scenario_concurrent(Ctx& ctx) {
    go_point(ctx);
    std::vector<Device*> chips = open_chips({0, 1, 2, 3});
    auto mesh = MeshDevice::create(chips);
    std::printf("concurrent: mesh id %d over chips 0..3\n", mesh->id());
    const int n = ctx.threads(4);
    std::atomic<uint64_t> ooms{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < n; ++t) {
        pool.emplace_back([&, t] {
            Rng rng(ctx.seed(200 + t));
            std::vector<BufferPtr> live;
            uint64_t my_ooms = 0;
            const BufferType types[] = {BufferType::DRAM, BufferType::L1, BufferType::L1_SMALL};
            for (int i = 0; i < 5000; ++i) {
                if (live.empty() || (live.size() < 32 && rng.chance(55))) {
                    BufferPtr b = try_create(chips[rng.below(2)], 32 * (1 + rng.below(128)), types[rng.below(3)], &my_ooms);
                    if (b) live.push_back(std::move(b));
                } else {
                    drop_random(live, rng);
                }
            }
            if (ctx.opt.leak && !live.empty()) keep_forever(live.front());
            live.clear();
            ooms += my_ooms;
        });
    }
    pool.emplace_back([&] {  // programs with CBs on chips and on the mesh
        Rng rng(ctx.seed(300));
        std::unique_ptr<ProgramImpl> kept;
        for (int i = 0; i < 300; ++i) {
            auto p = std::make_unique<ProgramImpl>();
            IDevice* target = (i % 3 == 2) ? static_cast<IDevice*>(mesh.get()) : chips[i % 3];
            int ncb = 1 + static_cast<int>(rng.below(3));
            for (int k = 0; k < ncb; ++k) p->add_circular_buffer(cores(0, 0, k, k), 32 * (1 + rng.below(64)));
            BufferPtr backing;
            MeshBufferPtr mbacking;
            if (rng.chance(30)) {
                if (i % 3 == 2) {
                    mbacking = try_mesh(mesh.get(), 2048, BufferType::L1);
                    if (mbacking) backing = mbacking->get_backing_buffer();
                } else {
                    backing = try_create(target, 2048, BufferType::L1);
                }
                if (backing) p->add_circular_buffer(cores(0, 0, 0, 0), 2048, true, backing);
            }
            p->allocate_circular_buffers(target);
            if (rng.chance(30)) p->allocate_circular_buffers(target);
            if (rng.chance(20)) {
                p->add_circular_buffer(cores(0, 0, 0, 0), 256);
                p->allocate_circular_buffers(target);
            }
            if (rng.chance(25)) p->deallocate_circular_buffers();
            if (ctx.opt.leak && i == 150) kept = std::move(p);
            p.reset();
            backing.reset();
            mbacking.reset();
        }
        if (kept) keep_forever(std::move(kept));
    });
    pool.emplace_back([&] {  // mesh buffers
        Rng rng(ctx.seed(400));
        std::vector<MeshBufferPtr> live;
        uint64_t my_ooms = 0;
        for (int i = 0; i < 1000; ++i) {
            if (live.size() < 8 && rng.chance(55)) {
                MeshBufferPtr mb = try_mesh(mesh.get(), 32 * (1 + rng.below(256)),
                                            rng.chance(50) ? BufferType::DRAM : BufferType::L1, &my_ooms);
                if (mb) live.push_back(std::move(mb));
            } else {
                drop_random(live, rng);
            }
        }
        if (ctx.opt.leak && !live.empty()) keep_forever(live.front());
        live.clear();
        ooms += my_ooms;
    });
    for (auto& th : pool) th.join();
    std::printf("concurrent: %d alloc threads + program thread + mesh thread, %" PRIu64 " OOM caught\n", n,
                ooms.load());
    return 0;
}

// The mangled prefix of namespace tt::tt_metal in this build (LAYOUT=V0: tt::tt_metal::v0).
#ifdef TT_REPLICA_LAYOUT_V0
#define TT_NS "2tt8tt_metal2v0"
#else
#define TT_NS "2tt8tt_metal"
#endif

// Checks the vtable slots, the Device id offset and the Buffer offsets of this build's LAYOUT at
// run time (dladdr).
int scenario_layout(Ctx& ctx) {
    go_point(ctx);
    int bad = 0;
    auto slot_name = [](const void* obj, int slot) -> std::string {
        void* const* vt = *static_cast<void* const* const*>(obj);
        Dl_info info{};
        if (dladdr(vt[slot], &info) == 0 || info.dli_sname == nullptr) return "?";
        return info.dli_sname;
    };
    auto expect = [&](const std::string& got, std::initializer_list<const char*> want, const char* what) {
        for (const char* w : want) {
            if (got == w) {
                std::printf("layout: ok   %-22s %s\n", what, got.c_str());
                return;
            }
        }
        std::printf("layout: FAIL %-22s %s\n", what, got.c_str());
        ++bad;
    };
    Device* d = CreateDevice(0);
    expect(slot_name(d, 0), {"_ZN" TT_NS "6DeviceD1Ev", "_ZN" TT_NS "6DeviceD2Ev"}, "Device slot 0 (D1)");
    expect(slot_name(d, 1), {"_ZN" TT_NS "6DeviceD0Ev"}, "Device slot 1 (D0)");
    expect(slot_name(d, 2), {"_ZNK" TT_NS "6Device4archEv"}, "Device slot 2 arch");
    expect(slot_name(d, 3), {"_ZNK" TT_NS "6Device2idEv"}, "Device slot 3 id");
    expect(slot_name(d, 4), {"_ZNK" TT_NS "6Device8build_idEv"}, "Device slot 4 build_id");
    auto mesh = MeshDevice::create({d});
    expect(slot_name(mesh.get(), 0), {"_ZN" TT_NS "11distributed10MeshDeviceD1Ev",
                                      "_ZN" TT_NS "11distributed10MeshDeviceD2Ev"}, "MeshDevice slot 0 (D1)");
    expect(slot_name(mesh.get(), 1), {"_ZN" TT_NS "11distributed10MeshDeviceD0Ev"}, "MeshDevice slot 1 (D0)");
    expect(slot_name(mesh.get(), 2), {"_ZNK" TT_NS "11distributed10MeshDevice4archEv"}, "MeshDevice slot 2");
    expect(slot_name(mesh.get(), 3), {"_ZNK" TT_NS "11distributed10MeshDevice2idEv"}, "MeshDevice slot 3");
    expect(slot_name(mesh.get(), 4), {"_ZNK" TT_NS "11distributed10MeshDevice8build_idEv"}, "MeshDevice slot 4");
    auto vtable = [](const char* sym) {
        return static_cast<const char*>(dlsym(RTLD_DEFAULT, sym)) + 16;
    };
    auto vptr = [](const void* obj) { return *static_cast<const char* const*>(obj); };
    if (vptr(d) != vtable("_ZTVN" TT_NS "6DeviceE")) {
        std::printf("layout: FAIL Device vptr != _ZTV + 16\n");
        ++bad;
    }
    if (vptr(mesh.get()) != vtable("_ZTVN" TT_NS "11distributed10MeshDeviceE")) {
        std::printf("layout: FAIL MeshDevice vptr != _ZTV + 16\n");
        ++bad;
    }
    if (*reinterpret_cast<const int*>(reinterpret_cast<const char*>(d) + 8) != d->id()) {
        std::printf("layout: FAIL Device id_ not at 8\n");
        ++bad;
    }
    BufferPtr b = Buffer::create(d, 4096, 1024, BufferType::L1);
    const char* raw = reinterpret_cast<const char*>(b.get());
#if defined(TT_REPLICA_LAYOUT_V2)
    std::memcpy(&raw, raw + 16, sizeof raw);  // the BufferImpl
#endif
    auto at = [&raw](std::size_t off, auto type_tag) {
        decltype(type_tag) v;
        std::memcpy(&v, raw + off, sizeof v);
        return v;
    };
    // Offsets of device_, size_, buffer_type_, owns_data_, allocation_status_,
    // hooked_allocation_, address_, page_size_, and the value of ALLOCATED.
#if defined(TT_REPLICA_LAYOUT_V0)
    const char* name = "V0";
    const std::size_t off[] = {0, 8, 16, 27, 56, 57, 64, 72};
    const uint8_t allocated = 2;
#elif defined(TT_REPLICA_LAYOUT_V2)
    const char* name = "V2 (BufferImpl via the pointer at 16)";
    const std::size_t off[] = {0, 8, 16, 27, 56, 57, 64, 72};
    const uint8_t allocated = 1;
#elif defined(TT_REPLICA_LAYOUT_UNKNOWN)
    const char* name = "UNKNOWN";
    const std::size_t off[] = {48, 56, 40, 34, 32, 33, 16, 24};
    const uint8_t allocated = 1;
#else
    const char* name = "V1";
    const std::size_t off[] = {16, 24, 32, 43, 72, 73, 80, 88};
    const uint8_t allocated = 1;
#endif
    bool ok = at(off[0], static_cast<void*>(nullptr)) == static_cast<void*>(static_cast<IDevice*>(d)) &&
              at(off[1], uint64_t{}) == 4096 && at(off[2], int{}) == 1 && at(off[3], bool{}) == true &&
              at(off[4], uint8_t{}) == allocated && at(off[5], bool{}) == false &&
              at(off[6], uint64_t{}) == b->address() && at(off[7], uint64_t{}) == 1024;
    std::printf("layout: %s Buffer %s offsets\n", ok ? "ok  " : "FAIL", name);
    if (!ok) ++bad;
    b.reset();
    return bad ? 1 : 0;
}

// Buffer::mark_as_deallocated on chips that are still open: upstream marks "without releasing
// underlying device memory", so the allocators keep it until the chip closes (chip 41), or to the
// end (chip 42: a leak). The marked Buffer objects are destroyed without any event, and new
// Buffers may take their heap addresses.
int scenario_mark(Ctx& ctx) {
    go_point(ctx);
    Device* a = CreateDevice(41);  // chips no other scenario uses
    Device* b = CreateDevice(42);
    BufferPtr a_dram = Buffer::create(a, 8192, 1024, BufferType::DRAM);
    BufferPtr a_l1 = Buffer::create(a, 2048, 1024, BufferType::L1);
    BufferPtr b_dram = Buffer::create(b, 4096, 1024, BufferType::DRAM);
    BufferPtr b_keep = Buffer::create(b, 1024, 1024, BufferType::L1);
    a_dram->mark_as_deallocated();
    b_dram->mark_as_deallocated();
    CHECK(!a_dram->is_allocated() && !b_dram->is_allocated());
    a_dram.reset();  // DEALLOCATED already: no free
    b_dram.reset();
    std::vector<BufferPtr> more;
    for (int i = 0; i < 8; ++i) more.push_back(Buffer::create(i % 2 ? a : b, 512 * (i + 1), 512, BufferType::DRAM));
    more.erase(more.begin(), more.begin() + 4);
    a->close();  // releases the marked buffer and everything else on chip 41
    a_l1.reset();
    more.clear();
    if (ctx.opt.leak) keep_forever(b_keep);
    b_keep.reset();
    std::printf("mark: done\n");
    return 0;
}

// ---------------------------------------------------------------- metal trace (src/trace.cpp)
// Chips 80-86, which no other scenario uses. The truth's trace_hazards, trace_invalid_replays,
// trace_region_hazards and trace_capture_allocs are what a tracer must report.

// The trace forms a scenario calls: the cq-id ones (two-bool Device::replay_trace), or, for
// traces_newest, those of the newest TT-NN and of older builds: MeshDevice's overloads taking
// the MeshCommandQueue& (ttnn's trace.cpp) and the one-bool Device::replay_trace.
bool g_newest_forms = false;

void replay_dev(Device* d, uint8_t cq, uint32_t tid, bool blocking) {
    if (g_newest_forms) {
        d->replay_trace(cq, tid, blocking);
    } else {
        d->replay_trace(cq, tid, blocking, false);
    }
}

// begin_mesh_trace: the id taken inside when id is null.
distributed::MeshTraceId begin_mesh(MeshDevice& mesh, uint8_t cq, const distributed::MeshTraceId* id = nullptr) {
    if (g_newest_forms) {
        if (id == nullptr) return mesh.begin_mesh_trace(mesh.mesh_command_queue(cq));
        mesh.begin_mesh_trace(mesh.mesh_command_queue(cq), *id);
        return *id;
    }
    if (id == nullptr) return mesh.begin_mesh_trace(cq);
    mesh.begin_mesh_trace(cq, *id);
    return *id;
}

void end_mesh(MeshDevice& mesh, uint8_t cq, const distributed::MeshTraceId& id) {
    if (g_newest_forms) {
        mesh.end_mesh_trace(mesh.mesh_command_queue(cq), id);
    } else {
        mesh.end_mesh_trace(cq, id);
    }
}

void replay_mesh(MeshDevice& mesh, uint8_t cq, const distributed::MeshTraceId& id, bool blocking) {
    if (g_newest_forms) {
        mesh.replay_mesh_trace(mesh.mesh_command_queue(cq), id, blocking);
    } else {
        mesh.replay_mesh_trace(cq, id, blocking);
    }
}

// Captured buffers stay alive until the trace is released; what comes after the capture lands
// elsewhere: no hazard.
int scenario_trace_safe(Ctx& ctx) {
    go_point(ctx);
    Device* d = CreateDevice(80);
    BufferPtr in = Buffer::create(d, 8192, 1024, BufferType::DRAM);
    const uint32_t tid = Trace::next_id();
    d->begin_trace(0, tid);
    BufferPtr a = Buffer::create(d, 8192, 1024, BufferType::DRAM);
    BufferPtr b = Buffer::create(d, 2048, 1024, BufferType::L1);
    d->end_trace(0, tid);
    BufferPtr c = Buffer::create(d, 4096, 1024, BufferType::DRAM);
    BufferPtr e = Buffer::create(d, 1024, 1024, BufferType::L1);
    for (int i = 0; i < 3; ++i) replay_dev(d, 0, tid, false);
    d->release_trace(tid);
    if (ctx.opt.leak) keep_forever(in);
    std::printf("trace_safe: trace %u replayed 3 times\n", tid);
    return 0;
}

// The ops' intermediates are freed during the capture; buffers allocated after it take their
// addresses and are alive at the replay: the replay overwrites them.
int scenario_trace_hazard(Ctx& ctx) {
    go_point(ctx);
    Device* d = CreateDevice(81);
    BufferPtr in = Buffer::create(d, 8192, 1024, BufferType::DRAM);
    const uint32_t tid = Trace::next_id();
    d->begin_trace(0, tid);
    BufferPtr a = Buffer::create(d, 16384, 1024, BufferType::DRAM);
    BufferPtr b = Buffer::create(d, 4096, 1024, BufferType::L1);
    BufferPtr out = Buffer::create(d, 4096, 1024, BufferType::DRAM);
    a.reset();
    b.reset();
    d->end_trace(0, tid);
    BufferPtr c = Buffer::create(d, 8192, 1024, BufferType::DRAM);  // where a was
    BufferPtr l = Buffer::create(d, 2048, 1024, BufferType::L1);    // where b was
    BufferPtr gone = Buffer::create(d, 4096, 1024, BufferType::DRAM);
    gone.reset();  // freed before the replay: no hazard
    replay_dev(d, 0, tid, false);
    replay_dev(d, 0, tid, false);
    c.reset();
    BufferPtr f = Buffer::create(d, 1024, 1024, BufferType::DRAM);  // where a was, after replay 2
    replay_dev(d, 0, tid, true);
    d->release_trace(tid);
    std::printf("trace_hazard: trace %u\n", tid);
    return 0;
}

// Dynamic trace storage (no trace region): the second trace's buffer is placed, top-down, under
// the first trace's DRAM high-water mark; replaying the first overwrites it.
int scenario_trace_two(Ctx& ctx) {
    go_point(ctx);
    AllocatorConfig cfg;
    cfg.capacity[0] = 1 << 20;  // DRAM 1 MiB
    cfg.capacity[4] = 0;        // no trace region
    Device* d = CreateDevice(82, cfg);
    const DeviceAddr base = d->allocator_config().base[0];
    const DeviceAddr top = base + d->allocator_config().capacity[0];
    const uint32_t t1 = Trace::next_id();
    d->begin_trace(0, t1);
    BufferPtr i1 = Buffer::create(d, 512 << 10, 1024, BufferType::DRAM);
    i1.reset();
    d->end_trace(0, t1);  // its buffer at the top
    // A filler from the top down to base + 400 KiB, so the next trace buffer goes below it.
    const DeviceAddr t1_bytes = 4096 + 2048;
    BufferPtr filler = Buffer::create(d, top - t1_bytes - (base + (400 << 10)), 1024, BufferType::DRAM,
                                      BufferShardingArgs{}, false);
    const uint32_t t2 = Trace::next_id();
    d->begin_trace(0, t2);
    BufferPtr i2 = Buffer::create(d, 4096, 1024, BufferType::DRAM);
    i2.reset();
    d->end_trace(0, t2);  // under the filler: under t1's high-water mark
    filler.reset();
    replay_dev(d, 0, t2, false);
    replay_dev(d, 0, t1, false);
    d->release_trace(t1);
    d->release_trace(t2);
    std::printf("trace_two: traces %u %u\n", t1, t2);
    return 0;
}

// A trace replayed after release_trace, and one replayed after its device closed: TT-Metal
// throws for both.
int scenario_trace_released(Ctx& ctx) {
    go_point(ctx);
    Device* d = CreateDevice(83);
    const uint32_t tid = Trace::next_id();
    d->begin_trace(1, tid);
    BufferPtr a = Buffer::create(d, 4096, 1024, BufferType::DRAM);
    d->end_trace(1, tid);
    replay_dev(d, 1, tid, false);
    d->release_trace(tid);
    bool threw = false;
    try {
        replay_dev(d, 1, tid, false);
    } catch (const std::runtime_error&) {
        threw = true;
    }
    CHECK(threw);
    a.reset();

    Device* c = CreateDevice(84);
    const uint32_t t2 = Trace::next_id();
    c->begin_trace(0, t2);
    BufferPtr b = Buffer::create(c, 4096, 1024, BufferType::DRAM);
    c->end_trace(0, t2);
    replay_dev(c, 0, t2, false);
    c->close();
    threw = false;
    try {
        replay_dev(c, 0, t2, false);
    } catch (const std::runtime_error&) {
        threw = true;
    }
    CHECK(threw);
    b.reset();
    std::printf("trace_released: traces %u %u\n", tid, t2);
    return 0;
}

// A mesh trace (2026 form: begin_mesh_trace(cq) takes the id), then one with the id given on the
// second command queue, replayed once more after its release.
int scenario_trace_mesh(Ctx& ctx) {
    go_point(ctx);
    auto mesh = MeshDevice::create(open_chips({85, 86}));
    Device* c85 = mesh->get_devices()[0];
    Device* c86 = mesh->get_devices()[1];
    MeshBufferPtr in = MeshBuffer::create(mesh.get(), 8192, 1024, BufferType::DRAM);
    distributed::MeshTraceId id = begin_mesh(*mesh, 0);
    MeshBufferPtr ma = MeshBuffer::create(mesh.get(), 8192, 1024, BufferType::DRAM);
    BufferPtr sa = Buffer::create(c85, 2048, 1024, BufferType::L1);
    ma.reset();
    sa.reset();
    end_mesh(*mesh, 0, id);
    MeshBufferPtr mc = MeshBuffer::create(mesh.get(), 4096, 1024, BufferType::DRAM);  // where ma was
    BufferPtr sc = Buffer::create(c86, 2048, 1024, BufferType::L1);  // chip 86 captured no L1
    replay_mesh(*mesh, 0, id, false);
    replay_mesh(*mesh, 0, id, true);

    // On the second command queue, the id given.
    distributed::MeshTraceId id2 = distributed::MeshTrace::next_id();
    begin_mesh(*mesh, 1, &id2);
    MeshBufferPtr mb = MeshBuffer::create(mesh.get(), 2048, 1024, BufferType::L1);
    end_mesh(*mesh, 1, id2);
    replay_mesh(*mesh, 1, id2, false);
    mesh->release_mesh_trace(id2);
    mesh->release_mesh_trace(id);
    bool threw = false;
    try {
        replay_mesh(*mesh, 1, id2, false);  // released: TT-Metal throws "must exist"
    } catch (const std::runtime_error&) {
        threw = true;
    }
    CHECK(threw);
    std::printf("trace_mesh: mesh traces %u %u\n", id.get(), id2.get());
    return 0;
}


// Issue #30, docs/ttmetal.md §12: CB residency at dispatch. Chips 90-93, which no other scenario
// uses. Chip 90 (n150-shaped, 8x8 grid): a program cache of 320 live programs whose CBs cover the
// grid (their registered CB sum is several times L1), each dispatched once and some again, so
// every core holds only the last one's; a program with the same CB index at different sizes on
// two disjoint core groups (tt-metal#39524); a trace captured with a large program, displaced by
// a small one, then replayed twice (residency back to the capture's per-core peak); a mesh over
// chips 91-92 dispatching a mesh program; chip 93 (HYBRID): per-core buffers whose cores got
// different addresses, and CBs above a per-core buffer on a core of their range (a throw) and on
// none (none), then CBs resident beside per-core buffers; chip 94: lockstep L1 buffers beside
// resident CBs, a clash on one core range of two.
// --cache-before-go: the go point comes once the cache's 320 programs are laid out and dispatched
// (what a tracer attached to a warm TT-NN process meets), and 3 cache hits end the run on chip 90.
int scenario_cb_cache(Ctx& ctx) {
    if (!ctx.opt.cache_before_go) go_point(ctx);
    using experimental::enqueue_program;
    AllocatorConfig cfg = AllocatorConfig::shaped(ChipShape::N150);
    Device* d = open_chips({90}, cfg).at(0);
    Rng rng(ctx.seed(30));

    std::vector<std::unique_ptr<ProgramImpl>> cache;
    uint64_t registered = 0;
    for (int i = 0; i < 320; ++i) {
        auto p = std::make_unique<ProgramImpl>();
        const uint64_t a = 16384 + 32 * rng.below(64), b = 4096 + 32 * (i % 16);
        p->add_circular_buffer(cores(0, 0, 7, 7), a);
        p->add_circular_buffer(cores(0, 0, 3, 7), b);
        registered += a + b;
        enqueue_program(d, *p);
        cache.push_back(std::move(p));
    }
    if (ctx.opt.cache_before_go) go_point(ctx);
    for (int i = 0; i < 40; ++i) enqueue_program(d, *cache[rng.below(cache.size())]);  // cache hits

    // The same CB index (0) with different sizes on disjoint core groups.
    auto split = std::make_unique<ProgramImpl>();
    split->add_circular_buffer(cores(0, 0, 3, 7), 4096);
    split->add_circular_buffer(cores(4, 0, 7, 7), 12288);
    split->add_circular_buffer(CoreRangeSet(std::vector<CoreRange>{CoreRange({0, 0}, {1, 1}), CoreRange({6, 6}, {7, 7})}),
                               2048);
    enqueue_program(d, *split);

    // A trace replaying a program with CBs.
    auto big = std::make_unique<ProgramImpl>();
    big->add_circular_buffer(cores(0, 0, 7, 7), 65536);
    big->add_circular_buffer(cores(2, 2, 5, 5), 16384);
    auto small = std::make_unique<ProgramImpl>();
    small->add_circular_buffer(cores(0, 0, 7, 3), 1024);
    enqueue_program(d, *big);  // warm-up run before the capture, as upstream requires
    enqueue_program(d, *small);
    const uint32_t tid = Trace::next_id();
    d->begin_trace(0, tid);
    enqueue_program(d, *small);
    enqueue_program(d, *big);
    d->end_trace(0, tid);
    enqueue_program(d, *small);
    replay_dev(d, 0, tid, false);
    enqueue_program(d, *cache[0]);
    replay_dev(d, 0, tid, true);
    d->release_trace(tid);

    // A mesh program.
    auto mesh = MeshDevice::create(open_chips({91, 92}, cfg));
    auto mp = std::make_unique<ProgramImpl>();
    mp->add_circular_buffer(cores(0, 0, 7, 7), 20480);
    mp->add_circular_buffer(cores(1, 1, 1, 1), 512);
    enqueue_program(mesh.get(), *mp);
    enqueue_program(mesh.get(), *mp);

    // Per-core (HYBRID) buffers whose cores got different addresses.
    AllocatorConfig hcfg = cfg;
    hcfg.hybrid = true;
    Device* h = open_chips({93}, hcfg).at(0);
    using experimental::per_core_allocation::create_per_core_buffer;
    BufferPtr one = create_per_core_buffer(h, 4096, 1024, 1);  // core 0 only
    BufferPtr four = create_per_core_buffer(h, 4 * 2048, 2048, 4);  // core 0 lower than cores 1-3

    // Clashes per core range (docs/ttmetal.md §12). On chip 93, a per-core buffer of 1 MiB per
    // core on banks 0 and 1 (the replica's cores (0,0) and (7,6)): a program whose CBs on
    // (4,0)-(7,7) pass it on core (7,6) throws; one whose CBs on (1,1)-(3,3) pass its address on
    // none of their cores is compiled without a throw (tttrace, which does not know the banks'
    // cores, says "possible" for both).
    BufferPtr wide = create_per_core_buffer(h, 2u << 20, 1024, 2);
    // A per-core request its first core (bank 0, under `wide` and a lockstep buffer of 16 KiB
    // per bank below it) cannot hold: refused with that core's numbers, its bank through both
    // lists (exhausted), though the lockstep list alone has room for it.
    BufferPtr lk = Buffer::create(h, 64 * 16384, 16384, BufferType::L1);
    CHECK(caught_oom("per-core exhausted", [&] { create_per_core_buffer(h, 2 * (400u << 10), 1024, 2); }));
    lk.reset();
    auto q1 = std::make_unique<ProgramImpl>();
    q1->add_circular_buffer(cores(4, 0, 7, 7), 512u << 10);
    bool threw = false;
    try {
        enqueue_program(h, *q1);
    } catch (const std::runtime_error&) {
        threw = true;
    }
    CHECK(threw);
    auto q2 = std::make_unique<ProgramImpl>();
    q2->add_circular_buffer(cores(1, 1, 3, 3), 512u << 10);
    q2->allocate_circular_buffers(h);  // compiled, not dispatched: TT-Metal throws nothing
    wide.reset();
    // CBs resident beside per-core buffers (below them): one core holds the most per-core bytes
    // (bank 0's, core (0,0)), another the most CBs ((1,0)), which a tracer cannot tell apart.
    auto q3 = std::make_unique<ProgramImpl>();
    q3->add_circular_buffer(cores(0, 0, 7, 7), 8192);
    q3->add_circular_buffer(cores(1, 0, 1, 0), 4096);
    enqueue_program(h, *q3);

    // Chip 94: lockstep L1 buffers beside resident CBs, and a clash on one core range of two.
    Device* k = open_chips({94}, cfg).at(0);
    BufferPtr lock = Buffer::create(k, 64 * 4096, 4096, BufferType::L1);  // 4 KiB per bank, at the top
    auto r1 = std::make_unique<ProgramImpl>();
    r1->add_circular_buffer(cores(0, 0, 7, 7), 32768);
    r1->add_circular_buffer(cores(2, 2, 3, 3), 8192);
    enqueue_program(k, *r1);
    BufferPtr low = Buffer::create(k, 64ull << 20, 1u << 20, BufferType::L1);  // 1 MiB per bank below it
    auto r2 = std::make_unique<ProgramImpl>();
    r2->add_circular_buffer(cores(0, 0, 3, 7), 65536);     // ends below `low`
    r2->add_circular_buffer(cores(4, 0, 7, 7), 512u << 10);  // ends above it: this range clashes
    threw = false;
    try {
        enqueue_program(k, *r2);
    } catch (const std::runtime_error&) {
        threw = true;
    }
    CHECK(threw);
    low.reset();
    enqueue_program(k, *r2);  // fits now, resident beside `lock`
    if (ctx.opt.cache_before_go) {
        // Cache hits of programs laid out before the go point: every core of chip 90 now holds
        // one of them, not the trace's peak the last replay made resident.
        for (int i = 0; i < 3; ++i) enqueue_program(d, *cache[rng.below(cache.size())]);
    }

    std::printf("cb_cache: %zu cached programs, %" PRIu64 " B of CBs per core registered\n", cache.size(), registered);
    if (ctx.opt.leak) {
        keep_forever(std::move(split));
        keep_forever(four);
        keep_forever(lock);
    }
    one.reset();
    four.reset();
    lock.reset();
    return 0;
}

// Every trace scenario, one after the other (distinct chips).
int scenario_traces(Ctx& ctx) {
    int rc = scenario_trace_safe(ctx);
    if (rc == 0) rc = scenario_trace_hazard(ctx);
    if (rc == 0) rc = scenario_trace_two(ctx);
    if (rc == 0) rc = scenario_trace_released(ctx);
    if (rc == 0) rc = scenario_trace_mesh(ctx);
    return rc;
}

// The same scenarios through the newest TT-NN's forms (MeshCommandQueue&) and the one-bool
// Device::replay_trace: the same truth.
int scenario_traces_newest(Ctx& ctx) {
    g_newest_forms = true;
    return scenario_traces(ctx);
}

// Windows (tttrace mark): three phases on chips 92 and 93, each with its own high-water marks.
// Between two phases, with --window-file PATH, it says "window N pid P" on stderr and waits for
// PATH.N (a tracer marks its window N meanwhile); then it marks the truth's window N.
void window_point(Ctx& ctx, int n, const char* name) {
    if (!ctx.opt.window_file.empty()) {
        std::fprintf(stderr, "window %d pid %d\n", n, static_cast<int>(getpid()));
        std::fflush(stderr);
        const std::string go = ctx.opt.window_file + "." + std::to_string(n);
        while (access(go.c_str(), F_OK) != 0) usleep(5000);
    }
    tt_replica_mark_window(name);
}

int scenario_windows(Ctx& ctx) {
    go_point(ctx);
    Device* a = CreateDevice(92);
    std::vector<BufferPtr> held;
    // Window 0: 192 KiB of DRAM at the peak, 64 KiB left; 32 KiB of L1, none left.
    for (int i = 0; i < 3; ++i) held.push_back(Buffer::create(a, 64 << 10, 2048, BufferType::DRAM));
    BufferPtr l1 = Buffer::create(a, 32 << 10, 2048, BufferType::L1);
    l1.reset();
    held.resize(1);
    window_point(ctx, 1, "warmup");
    // Window 1: DRAM from 64 up to 96 KiB, 80 left; a chip first used here (L1 to 24 KiB, none left).
    Device* b = CreateDevice(93);
    held.push_back(Buffer::create(a, 16 << 10, 2048, BufferType::DRAM));
    BufferPtr extra = Buffer::create(a, 16 << 10, 2048, BufferType::DRAM);
    if (ctx.opt.spike) {
        // --spike: window 1's DRAM peak on chip 92 up by 32 KiB (96 -> 128 KiB, under the run's 192), and
        // nothing else: freed at once, the allocator as it was.
        BufferPtr spike = Buffer::create(a, 32 << 10, 2048, BufferType::DRAM);
    }
    std::vector<BufferPtr> small;
    for (int i = 0; i < 3; ++i) small.push_back(Buffer::create(b, 8 << 10, 2048, BufferType::L1));
    small.clear();
    extra.reset();
    window_point(ctx, 2, "steady");
    // Window 2: chip 92 only goes down (its peak is its level at the mark: 80 KiB); chip 93 gets
    // 128 KiB of DRAM, kept to the end.
    held.erase(held.begin());
    held.push_back(Buffer::create(a, 4 << 10, 2048, BufferType::DRAM));
    held.push_back(Buffer::create(b, 128 << 10, 2048, BufferType::DRAM));
    held.clear();
    held.push_back(Buffer::create(b, 8 << 10, 2048, BufferType::DRAM));
    std::printf("windows: done\n");
    return 0;
}

// ---------------------------------------------------------------- TT-NN ops (issue #31)
//
// The TT-NN stand-in (testdata/replica/ttnn/, built with TTNN_ERA=...) is loaded after start as
// `import ttnn` loads it: _ttnn.so (the Python module) from this library's directory (or
// $TTWORK_LIBDIR), which maps _ttnncpp.so. Every op is called through the module's entry
// points, which call the op through a function pointer, as ttwork.py does from Python. Chips 60-62,
// which no other scenario uses.

struct TtnnApi {
    void* lib = nullptr;
    const char* (*era)() = nullptr;
    void* (*open_device)(int, int) = nullptr;
    void (*close_device)(void*) = nullptr;
    void (*clear_program_cache)(void*) = nullptr;
    void* (*tensor)(void*, uint64_t, int) = nullptr;
    void (*free)(void*) = nullptr;
    void* (*matmul)(void*, void*) = nullptr;
    void* (*add)(void*, void*) = nullptr;
    void* (*conv2d)(void*, void*) = nullptr;
    void* (*reshard)(void*, uint32_t) = nullptr;
    int (*split)(void*, uint32_t, uint64_t, void**, int) = nullptr;
    const char* (*last_error)() = nullptr;
    // ops_trace: Metal trace as ttnn.begin_trace_capture & co. call it, and ttnn.traced_add.
    int64_t (*begin_trace_capture)(void*) = nullptr;
    int (*end_trace_capture)(void*, uint32_t) = nullptr;
    int (*execute_trace)(void*, uint32_t, int) = nullptr;
    int (*release_trace)(void*, uint32_t) = nullptr;
    int (*traced_add)(void*, void*) = nullptr;
    int (*release_traced_add)(void*) = nullptr;
};

TtnnApi load_ttnn() {
    std::string dir;
    if (const char* env = std::getenv("TTWORK_LIBDIR"); env != nullptr && *env != '\0') {
        dir = env;
    } else {
        Dl_info info{};
        if (dladdr(reinterpret_cast<void*>(&load_ttnn), &info) != 0 && info.dli_fname != nullptr) {
            dir = info.dli_fname;
            dir = dir.substr(0, dir.find_last_of('/') == std::string::npos ? 0 : dir.find_last_of('/'));
        }
    }
    const std::string path = (dir.empty() ? std::string(".") : dir) + "/_ttnn.so";
    TtnnApi api;
    api.lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (api.lib == nullptr) {
        throw std::runtime_error("cannot load " + path + " (build the replica with TTNN_ERA=2026|2025|g1): " + dlerror());
    }
    auto sym = [&](const char* name) {
        void* p = dlsym(api.lib, name);
        if (p == nullptr) throw std::runtime_error(std::string("_ttnn.so has no ") + name);
        return p;
    };
#define TTNN_SYM(field, name) api.field = reinterpret_cast<decltype(api.field)>(sym(name))
    TTNN_SYM(era, "ttnn_era");
    TTNN_SYM(open_device, "ttnn_open_device");
    TTNN_SYM(close_device, "ttnn_close_device");
    TTNN_SYM(clear_program_cache, "ttnn_clear_program_cache");
    TTNN_SYM(tensor, "ttnn_tensor");
    TTNN_SYM(free, "ttnn_free");
    TTNN_SYM(matmul, "ttnn_matmul");
    TTNN_SYM(add, "ttnn_add");
    TTNN_SYM(conv2d, "ttnn_conv2d");
    TTNN_SYM(reshard, "ttnn_reshard");
    TTNN_SYM(split, "ttnn_split");
    TTNN_SYM(last_error, "ttnn_last_error");
    TTNN_SYM(begin_trace_capture, "ttnn_begin_trace_capture");
    TTNN_SYM(end_trace_capture, "ttnn_end_trace_capture");
    TTNN_SYM(execute_trace, "ttnn_execute_trace");
    TTNN_SYM(release_trace, "ttnn_release_trace");
    TTNN_SYM(traced_add, "ttnn_traced_add");
    TTNN_SYM(release_traced_add, "ttnn_release_traced_add");
#undef TTNN_SYM
    return api;
}

constexpr int kTtnnDram = 0, kTtnnL1 = 1;

// `ops`: on chip 60, one thread: matmul twice (program cache miss, then hit), add (L1 output),
// conv2d (nested: its own allocation, a Conv2d and a Matmul launch, then ttnn.add at depth 2, a
// cache hit), reshard that fails validation after allocating its output (caught), a tensor
// allocated outside any op after it, a reshard that works, split whose third output does not fit
// in L1 (out of memory after two outputs, caught), and an L1 tensor outside any op. --leak keeps
// four op outputs and the L1 tensor, and leaves the chip open with its program cache.
int scenario_ops(Ctx& ctx) {
    TtnnApi t = load_ttnn();
    go_point(ctx);
    void* dev = t.open_device(60, 0);
    CHECK(dev != nullptr);
    void* a = t.tensor(dev, 64 << 10, kTtnnDram);
    void* b = t.tensor(dev, 32 << 10, kTtnnDram);
    void* m1 = t.matmul(a, b);
    void* m2 = t.matmul(a, b);
    void* s = t.add(m1, m2);
    void* c = t.conv2d(a, b);
    CHECK(a && b && m1 && m2 && s && c);
    void* r = t.reshard(s, 0);
    CHECK(r == nullptr && std::strstr(t.last_error(), "reshard") != nullptr);
    void* z = t.tensor(dev, 4096, kTtnnDram);
    void* r2 = t.reshard(s, 8);
    CHECK(z && r2);
    void* parts[4] = {};
    const int n = t.split(s, 3, 400 << 10, parts, 4);
    CHECK(n == -1 && std::strstr(t.last_error(), "Out of Memory") != nullptr);
    void* l1 = t.tensor(dev, 2048, kTtnnL1);
    CHECK(l1 != nullptr);
    t.free(m2);
    t.free(z);
    std::printf("ops: %s ops on chip 60\n", t.era());
    if (ctx.opt.leak) {
        keep_forever(m1);
        keep_forever(c);
        keep_forever(r2);
        keep_forever(l1);
        t.free(a);
        t.free(b);
        t.free(s);
        return 0;
    }
    for (void* x : {a, b, m1, s, c, r2, l1}) t.free(x);
    t.clear_program_cache(dev);
    t.close_device(dev);
    return 0;
}

// `ops_threads`: --threads (default 2) threads share chip 61 and its program cache, each running 8
// rounds of matmul, add and conv2d on its own tensors (threads of the same parity have the same
// sizes: the other's programs are cache hits); then chip 62, whose programs are enqueued on its
// dispatch thread (CB layouts and dispatches on a thread where no op is live: the op is the
// launch's, through the program): matmul (miss), matmul (hit), add. --leak keeps each thread's
// last round and chip 62's outputs, and leaves both chips open.
int scenario_ops_threads(Ctx& ctx) {
    TtnnApi t = load_ttnn();
    go_point(ctx);
    void* dev = t.open_device(61, 0);
    void* disp = t.open_device(62, 1);
    CHECK(dev != nullptr && disp != nullptr);
    const int n = ctx.threads(2);
    std::atomic<int> failed{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
        threads.emplace_back([&, i] {
            for (int round = 0; round < 8; ++round) {
                void* a = t.tensor(dev, 16 << 10, kTtnnDram);
                void* b = t.tensor(dev, (8 << 10) * (1 + i % 2), kTtnnDram);
                void* m = t.matmul(a, b);
                void* s = m ? t.add(m, a) : nullptr;
                void* c = t.conv2d(a, b);
                if (!a || !b || !m || !s || !c) failed.fetch_add(1);
                if (round == 7 && ctx.opt.leak) {
                    keep_forever(s);
                    keep_forever(c);
                    s = c = nullptr;
                }
                for (void* x : {a, b, m, s, c}) t.free(x);
            }
        });
    }
    for (auto& th : threads) th.join();
    CHECK(failed.load() == 0);
    void* x = t.tensor(disp, 32 << 10, kTtnnDram);
    void* y = t.tensor(disp, 16 << 10, kTtnnDram);
    void* m1 = t.matmul(x, y);
    void* m2 = t.matmul(x, y);
    void* s = t.add(m1, x);
    CHECK(x && y && m1 && m2 && s);
    std::printf("ops_threads: %s ops, %d threads on chip 61, dispatch thread on chip 62\n", t.era(), n);
    if (ctx.opt.leak) {
        keep_forever(m1);
        keep_forever(s);
        for (void* v : {x, y, m2}) t.free(v);
        return 0;
    }
    for (void* v : {x, y, m1, m2, s}) t.free(v);
    for (void* d : {dev, disp}) {
        t.clear_program_cache(d);
        t.close_device(d);
    }
    return 0;
}

// `ops_trace`: Metal traces around and inside TT-NN ops, on chip 64, one thread. Outside any op:
// tensors a (64 KiB), b (32 KiB); begin_trace_capture; matmul(a, b) and add(m, a) run inside the
// capture (their outputs are captured); end_trace_capture (the trace buffer is allocated outside
// any op); matmul(a, b) again (a cache hit), then execute_trace right after it returned (outside
// the op), blocking and not. Then ttnn.traced_add(a, b) three times: the first captures inside the
// op (begin, the nested ttnn.add at depth 2, end: the trace buffer is the op's) and replays, the
// next two replay, inside the op; then both traces are released outside any op. --leak keeps the
// matmul outputs, leaves traced_add's trace unreleased and the chip open.
int scenario_ops_trace(Ctx& ctx) {
    TtnnApi t = load_ttnn();
    go_point(ctx);
    void* dev = t.open_device(64, 0);
    CHECK(dev != nullptr);
    void* a = t.tensor(dev, 64 << 10, kTtnnDram);
    void* b = t.tensor(dev, 32 << 10, kTtnnDram);
    CHECK(a && b);
    const int64_t tid = t.begin_trace_capture(dev);
    CHECK(tid >= 0);
    void* m = t.matmul(a, b);
    void* s = m ? t.add(m, a) : nullptr;
    CHECK(m && s);
    CHECK(t.end_trace_capture(dev, static_cast<uint32_t>(tid)) == 0);
    void* m2 = t.matmul(a, b);
    CHECK(m2 != nullptr);
    CHECK(t.execute_trace(dev, static_cast<uint32_t>(tid), 1) == 0);
    CHECK(t.execute_trace(dev, static_cast<uint32_t>(tid), 0) == 0);
    for (int i = 0; i < 3; ++i) CHECK(t.traced_add(a, b) == 0);
    std::printf("ops_trace: %s ops on chip 64, trace %" PRId64 " outside ops, traced_add's inside\n", t.era(), tid);
    if (ctx.opt.leak) {
        keep_forever(m);
        keep_forever(m2);
        CHECK(t.release_trace(dev, static_cast<uint32_t>(tid)) == 0);
        for (void* x : {a, b, s}) t.free(x);
        return 0;
    }
    CHECK(t.release_traced_add(dev) == 0);
    CHECK(t.release_trace(dev, static_cast<uint32_t>(tid)) == 0);
    for (void* x : {a, b, m, s, m2}) t.free(x);
    t.clear_program_cache(dev);
    t.close_device(dev);
    return 0;
}

// `ops_loop`: --events N matmuls on chip 63 (program cache hits after the first), each output
// freed at once; prints ops/s (what an op costs the process, traced or not).
int scenario_ops_loop(Ctx& ctx) {
    TtnnApi t = load_ttnn();
    go_point(ctx);
    void* dev = t.open_device(63, 0);
    void* a = t.tensor(dev, 4096, kTtnnDram);
    void* b = t.tensor(dev, 4096, kTtnnDram);
    CHECK(dev && a && b);
    const auto t0 = std::chrono::steady_clock::now();
    for (uint64_t i = 0; i < ctx.opt.events; ++i) {
        void* m = t.matmul(a, b);
        CHECK(m != nullptr);
        t.free(m);
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("ops_loop: %" PRIu64 " ops in %.3f s (%.0f ops/s)\n", ctx.opt.events, s,
                s > 0 ? static_cast<double>(ctx.opt.events) / s : 0.0);
    t.free(a);
    t.free(b);
    t.clear_program_cache(dev);
    t.close_device(dev);
    return 0;
}

struct Scenario {
    const char* name;
    int (*fn)(Ctx&);
};

const Scenario kScenarios[] = {
    {"basic", scenario_basic},
    {"threads", scenario_threads},
    {"oom", scenario_oom},
    {"burst", scenario_burst},
    {"hold", scenario_hold},
    {"mesh", scenario_mesh},
    {"galaxy", scenario_galaxy},
    {"sparse", scenario_sparse},
    {"cb", scenario_cb},
    {"cb_legacy", scenario_cb_legacy},
    {"close", scenario_close},
    {"capture", scenario_capture},
    {"sametype", scenario_sametype},
    {"mark", scenario_mark},
    {"midrun", scenario_midrun},
    {"concurrent", scenario_concurrent},
    {"layout", scenario_layout},
    {"l1", scenario_l1},
    {"alloc", scenario_alloc},
    {"trace_safe", scenario_trace_safe},
    {"trace_hazard", scenario_trace_hazard},
    {"trace_two", scenario_trace_two},
    {"trace_released", scenario_trace_released},
    {"trace_mesh", scenario_trace_mesh},
    {"traces", scenario_traces},
    {"traces_newest", scenario_traces_newest},
    {"cb_cache", scenario_cb_cache},
    {"windows", scenario_windows},
    {"ops", scenario_ops},
    {"ops_threads", scenario_ops_threads},
    {"ops_trace", scenario_ops_trace},
    {"ops_loop", scenario_ops_loop},
};

// `all`: every single-process scenario except burst, midrun (and layout), in this order.
const char* const kAllOrder[] = {"basic", "mesh",    "galaxy",     "sparse",  "cb",  "cb_legacy",
                                 "close", "capture", "sametype", "mark", "concurrent", "threads", "oom"};

void usage(FILE* f) {
    std::fprintf(f,
                 "usage: ttwork [--scenario NAME] [--truth PATH] [--seed N] [--threads N] [--events N]\n"
                 "              [--go-file PATH] [--hold-file PATH] [--window-file PATH] [--spike] [--leak]\n"
                 "              [--shape n150|n300|galaxy|blackhole] [--uncaught] [--open-before-go] [--alloc-before-go] [--idle-chip] [--hybrid] [--mesh]\n"
                 "              [--cache-before-go]\n"
                 "scenarios:");
    for (const auto& s : kScenarios) std::fprintf(f, " %s", s.name);
    std::fprintf(f, " all\n");
}

bool parse_u64(const char* s, uint64_t* out) {
    char* end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s, &end, 0);
    if (errno != 0 || end == s || *end != '\0') return false;
    *out = v;
    return true;
}

}  // namespace

extern "C" int ttwork_main(int argc, char** argv) {
    Ctx ctx;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        std::string val;
        bool has_inline = false;
        if (a.rfind("--", 0) == 0) {
            auto eq = a.find('=');
            if (eq != std::string::npos) {
                val = a.substr(eq + 1);
                a = a.substr(0, eq);
                has_inline = true;
            }
        }
        auto value = [&]() -> const char* {
            if (has_inline) return val.c_str();
            if (i + 1 >= argc) {
                std::fprintf(stderr, "ttwork: %s needs a value\n", a.c_str());
                std::exit(2);
            }
            return argv[++i];
        };
        uint64_t n = 0;
        if (a == "--scenario") {
            ctx.opt.scenario = value();
        } else if (a == "--truth") {
            ctx.opt.truth = value();
        } else if (a == "--go-file") {
            ctx.opt.go_file = value();
        } else if (a == "--hold-file") {
            ctx.opt.hold_file = value();
        } else if (a == "--leak") {
            ctx.opt.leak = true;
        } else if (a == "--shape") {
            ctx.opt.shape = value();
        } else if (a == "--uncaught") {
            ctx.opt.uncaught = true;
        } else if (a == "--open-before-go") {
            ctx.opt.open_before_go = true;
        } else if (a == "--hybrid") {
            ctx.opt.hybrid = true;
        } else if (a == "--mesh") {
            ctx.opt.mesh = true;
        } else if (a == "--cache-before-go") {
            ctx.opt.cache_before_go = true;
        } else if (a == "--alloc-before-go") {
            ctx.opt.alloc_before_go = true;
        } else if (a == "--window-file") {
            ctx.opt.window_file = value();
        } else if (a == "--spike") {
            ctx.opt.spike = true;
        } else if (a == "--idle-chip") {
            ctx.opt.idle_chip = true;
        } else if (a == "--seed" || a == "--threads" || a == "--events") {
            const char* v = value();
            if (!parse_u64(v, &n)) {
                std::fprintf(stderr, "ttwork: bad number for %s: %s\n", a.c_str(), v);
                return 2;
            }
            if (a == "--seed") ctx.opt.seed = n;
            if (a == "--threads") ctx.opt.threads = static_cast<int>(std::min<uint64_t>(n, 256));
            if (a == "--events") ctx.opt.events = n;
        } else if (a == "-h" || a == "--help") {
            usage(stdout);
            return 0;
        } else {
            std::fprintf(stderr, "ttwork: unknown argument %s\n", argv[i]);
            usage(stderr);
            return 2;
        }
    }

    int rc = 0;
    bool found = false;
    try {
        if (ctx.opt.scenario == "all") {
            // threads and oom open chips 0/1 with small capacities when they are the first to
            // open them; they run last so the scenarios before them get the default capacities.
            found = true;
            for (const char* name : kAllOrder) {
                for (const auto& s : kScenarios) {
                    if (std::strcmp(s.name, name) == 0 && rc == 0) {
                        std::printf("all: %s\n", name);
                        rc = s.fn(ctx);
                    }
                }
            }
        } else {
            for (const auto& s : kScenarios) {
                if (ctx.opt.scenario == s.name) {
                    found = true;
                    rc = s.fn(ctx);
                }
            }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "ttwork: scenario %s threw: %s\n", ctx.opt.scenario.c_str(), e.what());
        rc = 1;
    }
    if (!found) {
        std::fprintf(stderr, "ttwork: unknown scenario %s\n", ctx.opt.scenario.c_str());
        usage(stderr);
        return 2;
    }
    std::fflush(stdout);
    if (!ctx.opt.truth.empty()) {
        int w = tt_replica_write_truth(ctx.opt.truth.c_str());
        if (w != 0) {
            std::fprintf(stderr, "ttwork: writing the ground truth failed (%d)\n", w);
            if (rc == 0) rc = 1;
        }
    }
    if (!ctx.opt.hold_file.empty()) {
        // The memory the scenario left (with --leak) stays allocated, as the truth says, until
        // the hold file exists: for watching a live view.
        std::fprintf(stderr, "holding\n");
        while (access(ctx.opt.hold_file.c_str(), F_OK) != 0) usleep(5000);
    }
    return rc;
}
