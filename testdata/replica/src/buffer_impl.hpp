// LAYOUT=V2 (2026 pimpl): the members of a Buffer, held through Buffer::impl_ (offset 16).
// Offsets as docs/ttmetal.md §3 gives them: device_ 0, size_ 8, buffer_type_ 16, owns_data_ 27,
// allocation_status_ 56, hooked_allocation_ 57, address_ 64 (page_size_ 72: not in the facts).
#pragma once

#include <memory>
#include <optional>

#include "tt_metal/buffer.hpp"

namespace tt::tt_metal {

class BufferImpl {
public:
#ifdef TT_REPLICA_PIMPL2
    // The 2026 pimpl-2 design (docs/ttmetal.md §1): the lifecycle is BufferImpl's, with the
    // Buffer passed by reference (this in rdi is the BufferImpl, the Buffer in rsi).
    static std::shared_ptr<Buffer> create(IDevice* device, DeviceAddr size, DeviceAddr page_size,
                                          BufferType buffer_type, const BufferShardingArgs& sharding_args,
                                          std::optional<bool> bottom_up, std::optional<SubDeviceId> sub_device_id);
    static std::shared_ptr<Buffer> create(IDevice* device, DeviceAddr address, DeviceAddr size,
                                          DeviceAddr page_size, BufferType buffer_type,
                                          const BufferShardingArgs& sharding_args, std::optional<bool> bottom_up,
                                          std::optional<SubDeviceId> sub_device_id);
    void allocate_impl(Buffer& self);
    void deallocate(Buffer& self);
    void deallocate_impl(Buffer& self);
#endif
    IDevice* device_;                                     // 0
    DeviceAddr size_;                                     // 8
    BufferType buffer_type_;                              // 16
    TensorMemoryLayout buffer_layout_;                    // 20
    bool bottom_up_;                                      // 24
    std::optional<uint8_t> sub_device_id_;                // 25
    bool owns_data_;                                      // 27
    std::optional<uint64_t> sub_device_manager_id_;      // 32
    Allocator* allocator_;                                // 48
    AllocationStatus allocation_status_;                  // 56
    bool hooked_allocation_;                              // 57
    DeviceAddr address_;                                  // 64
    DeviceAddr page_size_;                                // 72
    uint64_t unique_id_;
    uint64_t alloc_epoch_;
    uint32_t shard_cores_;
};

}  // namespace tt::tt_metal
