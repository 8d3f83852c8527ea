// detail::ProgramImpl circular buffers (docs/ttmetal.md §5).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "tt_metal/buffer.hpp"
#include "tt_metal/types.hpp"

namespace tt::tt_metal {
class IDevice;
class Device;

namespace detail {

class ProgramImpl {
public:
    ProgramImpl();
    ~ProgramImpl();
    ProgramImpl(const ProgramImpl&) = delete;
    ProgramImpl& operator=(const ProgramImpl&) = delete;

    // Adds a CB of `size` bytes per core. A globally allocated CB lives in `backing` (an L1
    // buffer already tracked as a buffer). Marks the program as needing a new CB layout.
    // Returns the CB index.
    uint32_t add_circular_buffer(const CoreRangeSet& core_ranges,
                                 uint64_t size,
                                 bool globally_allocated = false,
                                 std::shared_ptr<Buffer> backing = nullptr);

    // Lays all CBs out (once; again after a CB was added) and reports each with
    // GraphTracker::track_allocate_cb. A MeshDevice is expanded to its chips (2026) or passed
    // through as is (legacy).
    void allocate_circular_buffers(const IDevice* device);
    // GraphTracker::track_deallocate_cb(chip) for every chip the program's CBs are on (2026);
    // nothing in legacy mode. Called by ~ProgramImpl.
    void deallocate_circular_buffers();

    // Upstream (tt_metal/impl/program/program.cpp, docs/ttmetal.md §12): run for every program of
    // a MeshWorkload at every distributed::EnqueueMeshWorkload (fast dispatch), cache hit or miss;
    // a miss assembles the program's command sequence (CircularBufferCommandGenerator writes each
    // unique CB core range's CB config). The replica records what that dispatch makes resident:
    // per chip of device and per core of the program's local CBs, those CBs (nothing while a
    // trace is being captured on the chip: the capture's per-core peak instead).
    void generate_dispatch_commands(IDevice* device, bool use_prefetcher_cache);

    // The id of the TT-NN launch that last dispatched the program (Program::set_runtime_id).
    void set_runtime_id(uint64_t id);
    uint64_t get_runtime_id() const;

    std::size_t num_circular_buffers() const { return cbs_.size(); }
    uint64_t circular_buffer_address(uint32_t index) const;
    uint64_t id() const { return id_; }

private:
    struct CircularBuffer {
        CoreRangeSet core_ranges;
        uint64_t size = 0;
        bool globally_allocated = false;
        std::shared_ptr<Buffer> backing;
        uint64_t address = 0;
    };
    struct Hold {
        const Device* chip = nullptr;
        uint64_t bytes = 0;  // local (not global) CB bytes charged to this chip
        uint64_t epoch = 0;
    };

    void release_holds_locked(bool track);
    // Throws upstream's "clash with L1 buffers" error when the CB region passes the lowest L1
    // buffer of one of chips. Caller holds replica::mem_mutex().
    void validate_circular_buffer_region_locked(const std::vector<const Device*>& chips);

    uint64_t id_;
    std::vector<CircularBuffer> cbs_;
    bool local_circular_buffer_allocation_needed_ = false;
    bool holds_legacy_ = false;
    bool command_sequence_cached_ = false;
    std::vector<Hold> holds_;
    uint64_t runtime_id_ = 0;
};

}  // namespace detail

using ProgramId = std::uint64_t;

// Upstream tt_metal/api/tt-metalium/program.hpp (docs/ttmetal.md §13): a Program holds its
// ProgramImpl through std::shared_ptr (its one member, so the ProgramImpl* is its first word).
// TT-NN calls set_runtime_id at every device-op launch, program cache hit or miss.
class Program {
public:
    Program();
    ~Program() noexcept;
    Program(const Program&) = delete;
    Program& operator=(const Program&) = delete;
    Program(Program&& other) noexcept;
    Program& operator=(Program&& other) noexcept;

    void set_runtime_id(ProgramId id);
    ProgramId get_runtime_id() const;

    detail::ProgramImpl& impl() { return *internal_; }
    const detail::ProgramImpl& impl() const { return *internal_; }

private:
    std::shared_ptr<detail::ProgramImpl> internal_;
};

namespace experimental {
// Replica stand-in for distributed::EnqueueMeshWorkload's per-program steps (upstream
// tt_metal/distributed/distributed.cpp: MeshWorkloadImpl::compile, whose allocate_circular_buffers
// lays the CBs out and validates them, load_binaries, generate_dispatch_commands, then the
// command queue's enqueue_mesh_workload).
void enqueue_program(IDevice* device, detail::ProgramImpl& program);
}  // namespace experimental

}  // namespace tt::tt_metal
