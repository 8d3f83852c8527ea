// SharedMemoryStatsProvider: upstream's per-chip SHM counters (tenstorrent/tt-metal
// tt_metal/impl/memory_tracking/memory_stats_shm.hpp, 2026). Each Device makes one in its
// initialization from the chip's UMD unique id (ClusterDescriptor::chip_unique_ids) and its
// logical id; it creates or opens the POSIX shared memory object /tt_device_<unique id>_memory
// (/dev/shm/tt_device_<unique id>_memory, the id in decimal) and keeps it mapped while the
// Device lives. Upstream's members in upstream's order, so a reader takes asic_id_ and
// device_id_ by their DWARF offsets.
#pragma once

#include <cstdint>

namespace tt::tt_metal {

// The header of upstream's DeviceMemoryRegion (its first fields, in their order); the replica
// keeps no counters in it.
struct DeviceMemoryRegion {
    uint32_t version;
    uint32_t num_active_processes;
    uint64_t last_update_timestamp;
    uint32_t reference_count;
    uint64_t board_serial;
    uint64_t asic_id;    // the UMD chip unique id, as in the file's name
    uint32_t device_id;  // the logical id of the last process to attach (each one rewrites it)
    uint8_t rest[4096 - 48];
};

class SharedMemoryStatsProvider {
public:
    SharedMemoryStatsProvider(uint64_t asic_id, int device_id, bool tracking_disabled, bool verbose);
    ~SharedMemoryStatsProvider();
    SharedMemoryStatsProvider(const SharedMemoryStatsProvider&) = delete;
    SharedMemoryStatsProvider& operator=(const SharedMemoryStatsProvider&) = delete;

    bool is_initialized() const { return region_ != nullptr; }
    int device_id() const { return device_id_; }
    uint64_t asic_id() const { return asic_id_; }

private:
    uint64_t asic_id_;
    int device_id_;
    int shm_fd_;
    DeviceMemoryRegion* region_;
    bool per_pid_tracking_enabled_;
    bool verbose_enabled_;
    bool is_creator_;
};

}  // namespace tt::tt_metal
