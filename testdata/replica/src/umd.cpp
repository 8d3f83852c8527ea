// The replica's UMD: a cluster topology with its chips' unique ids, board types, PCI bus ids and
// places (tt::umd::ClusterDescriptor, which the MetalContext's tt::Cluster points to:
// metal_env.hpp), and the per-chip SHM files each Device attaches to by its chip's unique id
// (SharedMemoryStatsProvider), as 2026 TT-Metal does (docs/ttmetal.md §11). Off unless
// TT_REPLICA_UMD_TOPOLOGY names a topology:
//   n300    Wormhole, 2 chips on one board: chip 0 on PCIe, chip 1 behind it over Ethernet
//   galaxy  Wormhole 6U Galaxy (UBB): 32 chips on 4 trays of 8, every one on PCIe (UMD reaches no
//           chip over Ethernet on 6U), each with the PCI bus id UMD keeps to pin its tray (the
//           tray's bus id | its place 1-8 on the tray)
//   p300    Blackhole P300: 2 chips on one board, both on PCIe, at ASIC locations 0 and 1
// TT_REPLICA_UMD_BOARD (a number, default 1) seeds the unique ids: processes given the same
// topology and board share physical chips, as processes of one host do.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "internal.hpp"
#include "tt_metal/memory_stats_shm.hpp"
#include "umd/cluster_descriptor.hpp"

namespace tt::tt_metal {

namespace {

uint64_t mix(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

struct Umd {
    std::string topology;  // "" when off
    umd::ClusterDescriptor desc;
    // The truth's places: where the replica put each chip, for the chips whose place upstream's
    // system descriptor takes from the cluster descriptor (UBB: tray and place on it; Blackhole:
    // the ASIC location; no tray off UBB, which is the host's to say).
    std::map<int, int> tray, place;
};

// unique_id: a 63-bit non-zero id per (board, slot), as UMD reads a chip's from its firmware.
uint64_t unique_id(uint64_t board, int slot) {
    uint64_t v = mix(board * 0x100 + static_cast<uint64_t>(slot)) & 0x7fffffffffffffffull;
    return v ? v : 1;
}

void add_chip(Umd& u, int id, uint64_t uid, bool local, umd::BoardType bt, uint8_t asic_location, uint64_t board) {
    u.desc.all_chips.insert(id);
    u.desc.chip_unique_ids[id] = uid;
    u.desc.chip_board_type[id] = bt;
    u.desc.asic_locations[id] = asic_location;
    u.desc.chip_to_board_id[id] = board;
    u.desc.board_to_chips[board].insert(id);
    u.desc.noc_translation_enabled[id] = true;
    if (local) u.desc.chips_with_mmio[id] = id;
}

void add_pci(Umd& u, int id, uint16_t bus) {
    char bdf[16];
    std::snprintf(bdf, sizeof bdf, "0000:%02x:00.0", bus);
    u.desc.chip_pci_bdfs[id] = bdf;
    u.desc.chip_to_bus_id[id] = bus;
}

void connect(Umd& u, int a, int ca, int b, int cb) {
    u.desc.ethernet_connections[a][ca] = {b, cb};
    u.desc.ethernet_connections[b][cb] = {a, ca};
    u.desc.active_eth_channels[a].insert(static_cast<uint32_t>(ca));
    u.desc.active_eth_channels[b].insert(static_cast<uint32_t>(cb));
}

Umd* build() {
    auto* u = new Umd();
    const char* t = std::getenv("TT_REPLICA_UMD_TOPOLOGY");
    if (t == nullptr || *t == '\0') return u;
    uint64_t board = 1;
    if (const char* b = std::getenv("TT_REPLICA_UMD_BOARD")) board = std::strtoull(b, nullptr, 0);
    u->topology = t;
    if (u->topology == "n300") {
        add_chip(*u, 0, unique_id(board, 0), true, tt::BoardType::N300, 0, board);
        add_chip(*u, 1, unique_id(board, 1), false, tt::BoardType::N300, 1, board);
        add_pci(*u, 0, 0x02);
        connect(*u, 0, 8, 1, 0);
        connect(*u, 0, 9, 1, 1);
    } else if (u->topology == "galaxy") {
        // Wormhole UBB trays 1-4 sit behind these bus ids (upstream's ubb_bus_ids); a chip's bus
        // id is its tray's | its place on the tray. UMD numbers PCIe chips in PCI address order,
        // so tray 3 (bus 0x0N) comes first, then trays 4, 2, 1.
        static const uint16_t tray_bus[4] = {0xC0, 0x80, 0x00, 0x40};
        static const int order[4] = {2, 3, 1, 0};
        int ids[4][8];
        int next = 0;
        for (int tr : order) {
            for (int n = 0; n < 8; ++n) {
                int id = next++;
                ids[tr][n] = id;
                add_chip(*u, id, unique_id(board, tr * 8 + n), true, tt::BoardType::UBB_WORMHOLE,
                         static_cast<uint8_t>(n + 1), board + static_cast<uint64_t>(tr));
                add_pci(*u, id, static_cast<uint16_t>(tray_bus[tr] | (n + 1)));
                u->tray[id] = tr + 1;
                u->place[id] = n + 1;
                u->desc.chip_locations[id] = umd::EthCoord{0, n % 4, n / 4 + tr * 2, 0, 0};
            }
        }
        for (int tr = 0; tr < 4; ++tr) {
            for (int n = 0; n + 1 < 8; ++n) connect(*u, ids[tr][n], 0, ids[tr][n + 1], 1);
        }
        for (int tr = 0; tr + 1 < 4; ++tr) connect(*u, ids[tr][7], 2, ids[tr + 1][0], 3);
    } else if (u->topology == "p300") {
        for (int n = 0; n < 2; ++n) {
            add_chip(*u, n, unique_id(board, n), true, tt::BoardType::P300, static_cast<uint8_t>(n), board);
            add_pci(*u, n, static_cast<uint16_t>(0x05 + n));
            u->place[n] = n;
        }
        connect(*u, 0, 0, 1, 1);
    } else {
        std::fprintf(stderr, "tt_replica: TT_REPLICA_UMD_TOPOLOGY=%s: not n300, galaxy or p300\n", t);
        std::abort();
    }
    for (const auto& [id, uid] : u->desc.chip_unique_ids) (void)uid, u->desc.chip_locations.emplace(id, umd::EthCoord{});
    for (const auto& [id, mmio] : u->desc.chips_with_mmio) {
        (void)mmio;
        for (int c : u->desc.board_to_chips[u->desc.chip_to_board_id[id]]) u->desc.chips_grouped_by_closest_mmio[id].insert(c);
    }
    return u;
}

Umd& umd_state() {
    static Umd* u = build();
    return *u;
}

std::mutex& shm_mutex() {
    static auto* m = new std::mutex();
    return *m;
}

// The chips whose Device made a provider: logical id -> unique id (for the truth).
std::map<int, uint64_t>& attached() {
    static auto* m = new std::map<int, uint64_t>();
    return *m;
}

std::string shm_name(uint64_t asic_id) { return "/tt_device_" + std::to_string(asic_id) + "_memory"; }

}  // namespace

SharedMemoryStatsProvider::SharedMemoryStatsProvider(uint64_t asic_id, int device_id, bool tracking_disabled,
                                                     bool verbose)
    : asic_id_(asic_id),
      device_id_(device_id),
      shm_fd_(-1),
      region_(nullptr),
      per_pid_tracking_enabled_(!tracking_disabled),
      verbose_enabled_(verbose),
      is_creator_(false) {
    std::string name = shm_name(asic_id);
    shm_fd_ = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (shm_fd_ != -1) {
        is_creator_ = true;
    } else if (errno == EEXIST) {
        shm_fd_ = shm_open(name.c_str(), O_RDWR, 0600);
    }
    if (shm_fd_ == -1) {
        std::fprintf(stderr, "tt_replica: shm_open %s: %s\n", name.c_str(), std::strerror(errno));
        return;
    }
    if (ftruncate(shm_fd_, sizeof(DeviceMemoryRegion)) == -1) {
        close(shm_fd_);
        shm_fd_ = -1;
        return;
    }
    void* p = mmap(nullptr, sizeof(DeviceMemoryRegion), PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd_, 0);
    if (p == MAP_FAILED) {
        close(shm_fd_);
        shm_fd_ = -1;
        return;
    }
    region_ = static_cast<DeviceMemoryRegion*>(p);
    if (is_creator_) region_->version = 4;
    region_->reference_count += 1;
    region_->asic_id = asic_id_;
    region_->device_id = static_cast<uint32_t>(device_id_);
}

SharedMemoryStatsProvider::~SharedMemoryStatsProvider() {
    if (region_ != nullptr) munmap(region_, sizeof(DeviceMemoryRegion));
    if (shm_fd_ != -1) close(shm_fd_);
}

namespace replica {

std::unique_ptr<SharedMemoryStatsProvider> make_shm_provider(int device_id) {
    Umd& u = umd_state();
    auto it = u.desc.chip_unique_ids.find(device_id);
    if (u.topology.empty() || it == u.desc.chip_unique_ids.end()) return nullptr;
    const char* off = std::getenv("TT_METAL_SHM_TRACKING_DISABLED");
    auto p = std::make_unique<SharedMemoryStatsProvider>(it->second, device_id, off != nullptr && *off == '1', false);
    if (!p->is_initialized()) return nullptr;
    std::lock_guard<std::mutex> lock(shm_mutex());
    attached()[device_id] = it->second;
    return p;
}

// ,"umd":{"topology":...,"chips":[...]}: every chip of the topology with its unique id, whether
// it is reached over Ethernet, its board type, its place where the replica gave it one (tray: the
// UBB tray, null off UBB; asic_location: the place on the tray or board, null where upstream's
// system descriptor does not take it from the cluster descriptor, a Wormhole chip off UBB) and
// whether a Device of this process attached to its SHM file (null topology: off).
void umd_truth_json(std::string& out) {
    Umd& u = umd_state();
    if (u.topology.empty()) {
        out += ",\n \"umd\":null";
        return;
    }
    std::lock_guard<std::mutex> lock(shm_mutex());
    out += ",\n \"umd\":{\"topology\":\"" + u.topology + "\",\"chips\":[";
    std::map<int, uint64_t> sorted(u.desc.chip_unique_ids.begin(), u.desc.chip_unique_ids.end());
    bool first = true;
    auto opt = [](const std::map<int, int>& m, int id) {
        auto it = m.find(id);
        return it == m.end() ? std::string("null") : std::to_string(it->second);
    };
    for (const auto& [id, uid] : sorted) {
        char buf[512];
        auto pci = u.desc.chip_pci_bdfs.find(id);
        std::snprintf(buf, sizeof buf,
                      "%s\n  {\"device\":%d,\"unique_id\":\"%" PRIu64 "\",\"remote\":%s,\"board_type\":%u,"
                      "\"tray\":%s,\"asic_location\":%s,\"pci\":\"%s\",\"attached\":%s,\"shm\":\"/dev/shm%s\"}",
                      first ? "" : ",", id, uid, u.desc.is_chip_remote(id) ? "true" : "false",
                      static_cast<unsigned>(u.desc.get_board_type(id)), opt(u.tray, id).c_str(), opt(u.place, id).c_str(),
                      pci == u.desc.chip_pci_bdfs.end() ? "" : pci->second.c_str(),
                      attached().count(id) ? "true" : "false", shm_name(uid).c_str());
        out += buf;
        first = false;
    }
    out += "]}";
}

umd::ClusterDescriptor* cluster_descriptor() {
    Umd& u = umd_state();
    return u.topology.empty() ? nullptr : &u.desc;
}

}  // namespace replica

}  // namespace tt::tt_metal
