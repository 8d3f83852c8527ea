// tt::tt_metal::Buffer: creation, allocation and deallocation in upstream's order
// (ttmetal-facts.md §1).
#include "tt_metal/buffer.hpp"

#include <atomic>
#include <cstddef>

#include "internal.hpp"
#include "tt_metal/device.hpp"
#include "tt_metal/graph_tracking.hpp"

namespace tt::tt_metal {

namespace {
std::atomic<uint64_t> g_next_buffer_id{1};
}

void Buffer::static_checks() {
    // The "V1" layout tttrace reads. offsetof on a non-standard-layout class is
    // conditionally supported (both GCC and Clang give the Itanium ABI offsets).
    static_assert(offsetof(Buffer, device_) == 16);
    static_assert(offsetof(Buffer, size_) == 24);
    static_assert(offsetof(Buffer, buffer_type_) == 32);
    static_assert(offsetof(Buffer, buffer_layout_) == 36);
    static_assert(offsetof(Buffer, bottom_up_) == 40);
    static_assert(offsetof(Buffer, sub_device_id_) == 41);
    static_assert(offsetof(Buffer, owns_data_) == 43);
    static_assert(offsetof(Buffer, sub_device_manager_id_) == 48);
    static_assert(offsetof(Buffer, allocator_) == 64);
    static_assert(offsetof(Buffer, allocation_status_) == 72);
    static_assert(offsetof(Buffer, hooked_allocation_) == 73);
    static_assert(offsetof(Buffer, address_) == 80);
    static_assert(offsetof(Buffer, page_size_) == 88);
    static_assert(sizeof(std::weak_ptr<Buffer>) == 16);
    static_assert(sizeof(BufferType) == 4 && sizeof(AllocationStatus) == 1);
}

Buffer::Buffer(Private,
               IDevice* device,
               DeviceAddr size,
               DeviceAddr page_size,
               BufferType buffer_type,
               TensorMemoryLayout buffer_layout,
               std::optional<bool> bottom_up,
               std::optional<SubDeviceId> sub_device_id,
               bool owns_data)
    : device_(device),
      size_(size),
      buffer_type_(buffer_type),
      buffer_layout_(buffer_layout),
      bottom_up_(bottom_up.value_or(buffer_type == BufferType::DRAM)),
      sub_device_id_(sub_device_id ? std::optional<uint8_t>(sub_device_id->id) : std::nullopt),
      owns_data_(owns_data),
      sub_device_manager_id_(std::nullopt),
      allocator_(device->allocator()),
      allocation_status_(AllocationStatus::ALLOCATION_REQUESTED),
      hooked_allocation_(false),
      address_(0),
      page_size_(page_size),
      unique_id_(g_next_buffer_id.fetch_add(1, std::memory_order_relaxed)),
      alloc_epoch_(0) {}

std::shared_ptr<Buffer> Buffer::create(IDevice* device,
                                       DeviceAddr size,
                                       DeviceAddr page_size,
                                       BufferType buffer_type,
                                       const BufferShardingArgs& sharding_args,
                                       std::optional<bool> bottom_up,
                                       std::optional<SubDeviceId> sub_device_id) {
    auto buffer = std::make_shared<Buffer>(Private{}, device, size, page_size, buffer_type,
                                           sharding_args.buffer_layout, bottom_up, sub_device_id, true);
    if (buffer->size_ == 0) {
        buffer->allocation_status_ = AllocationStatus::ALLOCATED;
        return buffer;
    }
    buffer->allocate_impl();
    return buffer;
}

std::shared_ptr<Buffer> Buffer::create(IDevice* device,
                                       DeviceAddr address,
                                       DeviceAddr size,
                                       DeviceAddr page_size,
                                       BufferType buffer_type,
                                       const BufferShardingArgs& sharding_args,
                                       std::optional<bool> bottom_up,
                                       std::optional<SubDeviceId> sub_device_id) {
    replica::count_call(replica::kBufferCreateView);
    {
        std::lock_guard<std::mutex> lock(replica::mem_mutex());
        for (const Device* chip : replica::chips_of(device)) replica::touch_chip(chip->id());
    }
    auto buffer = std::make_shared<Buffer>(Private{}, device, size, page_size, buffer_type,
                                           sharding_args.buffer_layout, bottom_up, sub_device_id, false);
    buffer->address_ = address;
    buffer->allocation_status_ = AllocationStatus::ALLOCATED;
    return buffer;
}

TT_PROBED void Buffer::allocate_impl() {
    // Replica: one lock across allocator + tracker, so the tracked order is the truth's order.
    std::lock_guard<std::mutex> lock(replica::mem_mutex());
    GraphTracker& tracker = GraphTracker::instance();
    if (tracker.hook_allocate(this)) {
        address_ = 0;
        hooked_allocation_ = true;
    } else {
        address_ = allocator_->allocate_buffer(this);  // throws on out-of-memory
    }
    alloc_epoch_ = replica::attach_epoch();
    allocation_status_ = AllocationStatus::ALLOCATED;
    tracker.track_allocate(this);
}

TT_PROBED void Buffer::deallocate() {
    if (!owns_data_) return;
    deallocate_impl();
}

TT_PROBED void Buffer::deallocate_impl() {
    std::lock_guard<std::mutex> lock(replica::mem_mutex());
    if (allocation_status_ != AllocationStatus::ALLOCATED) return;
    if (device_->is_initialized() && size_ != 0) {
        GraphTracker::instance().track_deallocate(this);
        if (alloc_epoch_ < replica::attach_epoch()) replica::note_unknown_free(size_);
        if (!hooked_allocation_) allocator_->deallocate_buffer(this);
    }
    allocation_status_ = AllocationStatus::DEALLOCATED;
}

TT_PROBED void Buffer::mark_as_deallocated() {
    replica::count_call(replica::kMarkAsDeallocated);
    allocation_status_ = AllocationStatus::DEALLOCATED;
}

Buffer::~Buffer() {
    if (allocation_status_ != AllocationStatus::DEALLOCATED) deallocate();
}

DeviceAddr Buffer::address() const { return address_; }
bool Buffer::is_allocated() const { return allocation_status_ == AllocationStatus::ALLOCATED; }
DeviceAddr Buffer::page_size() const { return page_size_; }
#ifdef TT_REPLICA_OUTOFLINE_SIZE
DeviceAddr Buffer::size() const { return size_; }
#endif

}  // namespace tt::tt_metal
