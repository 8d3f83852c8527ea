// IDevice / Device / distributed::MeshDevice, with the vtable order and member offsets tttrace
// relies on (docs/ttmetal.md §3).
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "tt_metal/allocator.hpp"
#include "tt_metal/types.hpp"

namespace tt::tt_metal {

class SharedMemoryStatsProvider;

// No data, only a vptr. Slots: [0] D1, [1] D0, [2] arch, [3] id, [4] build_id, then the rest.
class IDevice {
public:
    IDevice() = default;
    IDevice(const IDevice&) = delete;
    IDevice& operator=(const IDevice&) = delete;
    virtual ~IDevice();
    virtual ARCH arch() const = 0;
    virtual int id() const = 0;
    virtual uint32_t build_id() const = 0;
    virtual bool is_initialized() const = 0;
    virtual Allocator* allocator() const = 0;
    virtual std::size_t num_devices() const = 0;
    virtual bool close() = 0;
};

class Device : public IDevice {
public:
    Device(int device_id, const AllocatorConfig& config);
    ~Device() override;

    ARCH arch() const override;
    int id() const override;
    uint32_t build_id() const override;
    bool is_initialized() const override;
    Allocator* allocator() const override;
    std::size_t num_devices() const override;
    // Drops the chip's allocator wholesale, releases its CBs, marks it not initialized.
    bool close() override;

    const AllocatorConfig& allocator_config() const;
    ChipAllocator* chip_allocator() const { return default_allocator_.get(); }

    // Metal trace (upstream tt_metal/impl/device/device.cpp, docs/ttmetal.md §10). begin_trace
    // starts capturing on command queue cq_id (throws if it already captures); end_trace stops
    // it and stores the trace in a TRACE buffer (in DRAM top-down when the chip has no trace
    // region: dynamic trace storage); replay_trace throws for a trace that does not exist
    // (released, never captured, or its device closed); release_trace frees its buffer.
    void begin_trace(uint8_t cq_id, uint32_t tid);
    void end_trace(uint8_t cq_id, uint32_t tid);
    void replay_trace(uint8_t cq_id, uint32_t tid, bool block_on_device, bool block_on_worker_thread);
    // The older one-bool form, which some builds have beside the two-bool one (its own symbol,
    // _ZN2tt8tt_metal6Device12replay_traceEhjb; implemented on its own, as the old Device's).
    void replay_trace(uint8_t cq_id, uint32_t tid, bool blocking);
    void release_trace(uint32_t tid);

private:
    static void static_checks();
    std::unique_ptr<ChipAllocator> initialize_allocator(const AllocatorConfig& config);

    int id_;  // first data member: offset 8
    std::atomic<bool> initialized_;
    uint32_t build_id_;
    // Upstream 2026 Device::default_allocator_ (what allocator_impl() returns).
    std::unique_ptr<ChipAllocator> default_allocator_;
    // Upstream 2026: the chip's SHM counters, /dev/shm/tt_device_<unique id>_memory (umd.cpp).
    std::unique_ptr<SharedMemoryStatsProvider> shm_stats_provider_;
};

// Open chip `device_id`, or return it if it is already open (a closed chip is opened anew as a
// new Device object). Devices are never destroyed. `config` only applies to a new open.
Device* CreateDevice(int device_id, const AllocatorConfig& config = AllocatorConfig{});
// True if chip `device_id` is currently open.
bool IsDeviceOpen(int device_id);

// CB behaviour switch: false (default) = 2026 upstream (mesh expanded to chips, CBs freed with
// track_deallocate_cb); true = legacy (track_allocate_cb gets the MeshDevice, no track_deallocate_cb).
void set_legacy_cb_behaviour(bool legacy);
bool legacy_cb_behaviour();

// Trace ids of the single-device API (upstream Trace::next_id, a process-wide counter).
struct Trace {
    static uint32_t next_id();
};

namespace distributed {

// Upstream mesh_trace_id.hpp: the id of a mesh trace.
using MeshTraceId = ttsl::StrongType<uint32_t, struct MeshTraceIdTag>;

// Upstream MeshTrace::next_id (its own process-wide counter).
struct MeshTrace {
    static MeshTraceId next_id();
};

class MeshDevice;

// Upstream tt-metalium/mesh_command_queue.hpp: the abstract queue of a MeshDevice, its first
// members the MeshDevice and the queue's id (offsets 8 and 16 after the vptr), with inline
// accessors (no out-of-line symbol).
class MeshCommandQueue {
protected:
    MeshDevice* mesh_device_ = nullptr;
    uint32_t id_ = 0;

    MeshCommandQueue(MeshDevice* mesh_device, uint32_t id) : mesh_device_(mesh_device), id_(id) {}

public:
    MeshCommandQueue(const MeshCommandQueue&) = delete;
    MeshCommandQueue& operator=(const MeshCommandQueue&) = delete;
    virtual ~MeshCommandQueue() = default;

    MeshDevice* device() const { return mesh_device_; }
    uint32_t id() const { return id_; }
};

class MeshDevice : public IDevice, public std::enable_shared_from_this<MeshDevice> {
    struct Private {
        explicit Private() = default;
    };

public:
    // A mesh over `chips` (open Devices). Its id() is a per-process counter starting at 0.
    // MeshDevices live for the whole process (a reference is kept), like the chips.
    static std::shared_ptr<MeshDevice> create(std::vector<Device*> chips);
    MeshDevice(Private, int mesh_id, std::vector<Device*> chips, MeshDevice* parent);
    ~MeshDevice() override;

    ARCH arch() const override;
    int id() const override;
    uint32_t build_id() const override;
    bool is_initialized() const override;
    Allocator* allocator() const override;
    std::size_t num_devices() const override;
    // Closes sub-meshes, then calls Device::close() on each chip.
    bool close() override;

    // A distinct MeshDevice (next mesh id) over a subset of this mesh's chips.
    std::shared_ptr<MeshDevice> create_submesh(const std::vector<Device*>& chips);
    const std::vector<Device*>& get_devices() const { return chips_; }
    MeshDevice* get_parent_mesh() const { return parent_; }
    MeshAllocator* mesh_allocator() const { return allocator_.get(); }
    // Every MeshDevice made in the process (they live for the process), for the truth.
    static std::vector<std::shared_ptr<MeshDevice>> all();

    // Metal trace on every chip of the mesh (upstream mesh_device.cpp): the same rules as
    // Device's, the trace stored in a mesh buffer. begin_mesh_trace(cq_id) takes the next id
    // itself (2026 upstream) and returns it.
    MeshTraceId begin_mesh_trace(uint8_t cq_id);
    void begin_mesh_trace(uint8_t cq_id, const MeshTraceId& trace_id);
    void end_mesh_trace(uint8_t cq_id, const MeshTraceId& trace_id);
    void replay_mesh_trace(uint8_t cq_id, const MeshTraceId& trace_id, bool blocking);
    void release_mesh_trace(const MeshTraceId& trace_id);

    // The 2026 overloads (upstream mesh_device.cpp) that ttnn's trace.cpp and BeginTraceCapture
    // call: each throws unless cq.device() == this, then forwards cq.id() to the implementation
    // (upstream's MeshDeviceImpl), never through the cq-id forms above.
    MeshTraceId begin_mesh_trace(MeshCommandQueue& cq);
    void begin_mesh_trace(MeshCommandQueue& cq, const MeshTraceId& trace_id);
    void end_mesh_trace(MeshCommandQueue& cq, const MeshTraceId& trace_id);
    void replay_mesh_trace(MeshCommandQueue& cq, const MeshTraceId& trace_id, bool blocking);
    // Upstream's mesh_command_queue(cq_id): the mesh's queue cq_id (two per mesh here).
    MeshCommandQueue& mesh_command_queue(uint8_t cq_id) const;

private:
    // Upstream's MeshDevice::initialize: builds the mesh's own allocator (called by create and
    // create_submesh right after the constructor).
    void initialize();

    int mesh_id_;
    std::atomic<bool> initialized_;
    std::vector<Device*> chips_;
    std::unique_ptr<MeshAllocator> allocator_;
    MeshDevice* parent_;
    std::vector<std::shared_ptr<MeshDevice>> submeshes_;
    std::vector<std::unique_ptr<MeshCommandQueue>> mesh_command_queues_;
};

}  // namespace distributed

}  // namespace tt::tt_metal
