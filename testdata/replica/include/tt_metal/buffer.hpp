// tt::tt_metal::Buffer with the "V1" layout (2025 - early 2026 mainline), ttmetal-facts.md §3.
#pragma once

#include <memory>
#include <optional>

#include "tt_metal/types.hpp"

namespace tt::tt_metal {

class IDevice;
class Allocator;

class Buffer final : public std::enable_shared_from_this<Buffer> {
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

private:
    void allocate_impl();
    void deallocate_impl();
    static void static_checks();

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
};

}  // namespace tt::tt_metal
