// tt::tt_metal::Buffer, docs/ttmetal.md §3. The member layout is chosen at build time
// (Makefile LAYOUT=...):
//   V1 (default)  2025 - early 2026 mainline: enable_shared_from_this, members from 16.
//   V0            late 2024: no enable_shared_from_this, members from 0, atomic status with
//                 four states (ALLOCATED = 2); symbols in namespace v0 (the Makefile's
//                 -Dtt_metal=tt_metal::v0 gives the mangling of upstream's inline namespace).
//   V2            2026 pimpl: the members live in BufferImpl (src/buffer_impl.hpp); Buffer
//                 holds std::unique_ptr<BufferImpl> at 16; out-of-line accessors, among them
//                 Buffer::size() const and Buffer::device() const.
//   UNKNOWN       V1's members in another order: matches no profile tttrace knows.
#pragma once

#include <atomic>
#include <memory>
#include <optional>

#include "tt_metal/types.hpp"

namespace tt::tt_metal {

class IDevice;
class Allocator;
class BufferImpl;

// Bytes [offset, offset + size) of a buffer.
struct BufferRegion {
    DeviceAddr offset = 0;
    DeviceAddr size = 0;
};

class Buffer final
#ifndef TT_REPLICA_LAYOUT_V0
    : public std::enable_shared_from_this<Buffer>
#endif
{
    struct Private {
        explicit Private() = default;
    };

public:
    // Owning buffer: allocates (allocate_impl) unless size == 0.
    static std::shared_ptr<Buffer> create(
        IDevice* device,
        DeviceAddr size,
        DeviceAddr page_size,
        BufferType buffer_type,
        const BufferShardingArgs& sharding_args = BufferShardingArgs{},
        std::optional<bool> bottom_up = std::nullopt,
        std::optional<SubDeviceId> sub_device_id = std::nullopt);

    // Pre-allocated view at `address`: owns_data_ = false, never allocates, never tracked.
    static std::shared_ptr<Buffer> create(
        IDevice* device,
        DeviceAddr address,
        DeviceAddr size,
        DeviceAddr page_size,
        BufferType buffer_type,
        const BufferShardingArgs& sharding_args = BufferShardingArgs{},
        std::optional<bool> bottom_up = std::nullopt,
        std::optional<SubDeviceId> sub_device_id = std::nullopt);

    // A pre-allocated view of a region of this buffer, made through the address-taking create
    // (which clang -O3 inlines here, as upstream's Buffer::view). Counts nothing.
    std::shared_ptr<Buffer> view(const BufferRegion& region);

    Buffer(Private,
           IDevice* device,
           DeviceAddr size,
           DeviceAddr page_size,
           BufferType buffer_type,
           TensorMemoryLayout buffer_layout,
           std::optional<bool> bottom_up,
           std::optional<SubDeviceId> sub_device_id,
           bool owns_data);
    ~Buffer();

    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    void deallocate();
    void mark_as_deallocated();

    // Out of line, as upstream (usable to confirm offsets by disassembly).
    DeviceAddr address() const;
    bool is_allocated() const;
    DeviceAddr page_size() const;
    // Cores of the shard grid for a sharded buffer, nullopt for an interleaved one (upstream:
    // the allocator passes it to BankManager::allocate_buffer as num_shards).
    std::optional<uint32_t> num_cores() const;
    bool is_trace() const;
    bool is_dram() const;
    bool is_l1() const;

#ifdef TT_REPLICA_LAYOUT_V2
    // Pimpl: every accessor is out of line; Buffer::size() const and Buffer::device() const
    // are the exported markers of this layout.
    DeviceAddr size() const;
    IDevice* device() const;
    BufferType buffer_type() const;
    TensorMemoryLayout buffer_layout() const;
    bool bottom_up() const;
    bool owns_data() const;
    bool hooked_allocation() const;
    AllocationStatus allocation_status() const;
    uint64_t unique_id() const;
#else
#ifdef TT_REPLICA_OUTOFLINE_SIZE
    DeviceAddr size() const;
#else
    // Inline (hidden by -fvisibility-inlines-hidden) as in upstream V1: an exported
    // Buffer::size() const is a marker of the 2026 pimpl layout (V2).
    DeviceAddr size() const { return size_; }
#endif
    IDevice* device() const { return device_; }
    BufferType buffer_type() const { return buffer_type_; }
    TensorMemoryLayout buffer_layout() const { return buffer_layout_; }
    bool bottom_up() const { return bottom_up_; }
    bool owns_data() const { return owns_data_; }
    bool hooked_allocation() const { return hooked_allocation_; }
    AllocationStatus allocation_status() const { return allocation_status_; }
    uint64_t unique_id() const { return unique_id_; }
#endif

private:
#ifdef TT_REPLICA_PIMPL2
    // The lifecycle lives in BufferImpl, which makes Buffers (Private) and reaches impl_.
    friend class BufferImpl;
#else
    void allocate_impl();
    void deallocate_impl();
#endif
    static void static_checks();

#ifdef TT_REPLICA_LAYOUT_V2
    using Fields = BufferImpl;
#else
    using Fields = Buffer;
#endif
    // The object that holds the members: the Buffer itself, or its BufferImpl.
    inline Fields& f();
    inline const Fields& f() const;

#if defined(TT_REPLICA_LAYOUT_V2)
    std::unique_ptr<BufferImpl> impl_;                    // 16
#elif defined(TT_REPLICA_LAYOUT_V0)
    IDevice* device_;                                     // 0
    DeviceAddr size_;                                     // 8
    BufferType buffer_type_;                              // 16
    TensorMemoryLayout buffer_layout_;                    // 20
    bool bottom_up_;                                      // 24
    std::optional<uint8_t> sub_device_id_;                // 25
    bool owns_data_;                                      // 27
    std::optional<uint64_t> sub_device_manager_id_;      // 32
    Allocator* allocator_;                                // 48
    std::atomic<AllocationStatus> allocation_status_;     // 56
    bool hooked_allocation_;                              // 57
    DeviceAddr address_;                                  // 64
    DeviceAddr page_size_;                                // 72
    // >= 80: replica-only, not read by tttrace.
    uint64_t unique_id_;
    uint64_t alloc_epoch_;
    uint32_t shard_cores_;
#elif defined(TT_REPLICA_LAYOUT_UNKNOWN)
    DeviceAddr address_;                                  // 16
    DeviceAddr page_size_;                                // 24
    AllocationStatus allocation_status_;                  // 32
    bool hooked_allocation_;                              // 33
    bool owns_data_;                                      // 34
    std::optional<uint8_t> sub_device_id_;                // 35
    BufferType buffer_type_;                              // 40
    TensorMemoryLayout buffer_layout_;                    // 44
    IDevice* device_;                                     // 48
    DeviceAddr size_;                                     // 56
    bool bottom_up_;                                      // 64
    std::optional<uint64_t> sub_device_manager_id_;      // 72
    Allocator* allocator_;                                // 88
    uint64_t unique_id_;
    uint64_t alloc_epoch_;
    uint32_t shard_cores_;
#else
    IDevice* device_;                                     // 16
    DeviceAddr size_;                                     // 24
    BufferType buffer_type_;                              // 32
    TensorMemoryLayout buffer_layout_;                    // 36
    bool bottom_up_;                                      // 40
    std::optional<uint8_t> sub_device_id_;                // 41
    bool owns_data_;                                      // 43
    std::optional<uint64_t> sub_device_manager_id_;      // 48
    Allocator* allocator_;                                // 64
    AllocationStatus allocation_status_;                  // 72
    bool hooked_allocation_;                              // 73
    DeviceAddr address_;                                  // 80
    DeviceAddr page_size_;                                // 88
    // >= 96: replica-only, not read by tttrace.
    uint64_t unique_id_;
    uint64_t alloc_epoch_;
    uint32_t shard_cores_;
#endif
};

}  // namespace tt::tt_metal
