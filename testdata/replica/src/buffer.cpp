// tt::tt_metal::Buffer: creation, allocation and deallocation in upstream's order
// (docs/ttmetal.md §1).
#include "tt_metal/buffer.hpp"

#include <atomic>
#include <cstddef>
#include <cstring>

#include "internal.hpp"
#include "tt_metal/device.hpp"
#include "tt_metal/graph_tracking.hpp"
#ifdef TT_REPLICA_LAYOUT_V2
#include "buffer_impl.hpp"
#endif
#ifdef TT_REPLICA_INLINE_TRACKER
#include "graph_tracking_inline.hpp"
#endif

namespace tt::tt_metal {

namespace {
std::atomic<uint64_t> g_next_buffer_id{1};

// TYPE_U8: dirty the padding after a one-byte buffer_type_, as a heap that hands out reused
// memory leaves it: a tracer reading the field wider than the library's code does reads garbage.
inline void dirty_type_padding(BufferType* type) {
#ifdef TT_REPLICA_TYPE_U8
    static_assert(sizeof(BufferType) == 1);
    std::memset(reinterpret_cast<unsigned char*>(type) + 1, 0xAB, 3);
#else
    (void)type;
#endif
}
}

#ifdef TT_REPLICA_LAYOUT_V2
inline Buffer::Fields& Buffer::f() { return *impl_; }
inline const Buffer::Fields& Buffer::f() const { return *impl_; }
#else
inline Buffer::Fields& Buffer::f() { return *this; }
inline const Buffer::Fields& Buffer::f() const { return *this; }
#endif

// The track_* calls as this build makes them: out of line (upstream), or with their bodies
// inlined here (INLINE_TRACKER=1, what LTO can do).
#ifdef TT_REPLICA_INLINE_TRACKER
#define TT_TRACK_ALLOCATE(tracker, buffer) (tracker).track_allocate_inline(buffer)
#define TT_TRACK_DEALLOCATE(tracker, buffer) (tracker).track_deallocate_inline(buffer)
#else
#define TT_TRACK_ALLOCATE(tracker, buffer) (tracker).track_allocate(buffer)
#define TT_TRACK_DEALLOCATE(tracker, buffer) (tracker).track_deallocate(buffer)
#endif

void Buffer::static_checks() {
    // The layout tttrace reads. offsetof on a non-standard-layout class is
    // conditionally supported (both GCC and Clang give the Itanium ABI offsets).
#ifdef TT_REPLICA_TYPE_U8
    static_assert(sizeof(BufferType) == 1 && sizeof(AllocationStatus) == 1);
#else
    static_assert(sizeof(BufferType) == 4 && sizeof(AllocationStatus) == 1);
#endif
#if defined(TT_REPLICA_LAYOUT_V2)
    static_assert(offsetof(Buffer, impl_) == 16);
    static_assert(sizeof(std::unique_ptr<BufferImpl>) == 8);
    static_assert(offsetof(BufferImpl, device_) == 0);
    static_assert(offsetof(BufferImpl, size_) == 8);
    static_assert(offsetof(BufferImpl, buffer_type_) == 16);
    static_assert(offsetof(BufferImpl, owns_data_) == 27);
    static_assert(offsetof(BufferImpl, allocation_status_) == 56);
    static_assert(offsetof(BufferImpl, hooked_allocation_) == 57);
    static_assert(offsetof(BufferImpl, address_) == 64);
    static_assert(offsetof(BufferImpl, page_size_) == 72);
#elif defined(TT_REPLICA_LAYOUT_V0)
    static_assert(offsetof(Buffer, device_) == 0);
    static_assert(offsetof(Buffer, size_) == 8);
    static_assert(offsetof(Buffer, buffer_type_) == 16);
    static_assert(offsetof(Buffer, owns_data_) == 27);
    static_assert(offsetof(Buffer, allocation_status_) == 56);
    static_assert(sizeof(std::atomic<AllocationStatus>) == 1);
    static_assert(offsetof(Buffer, hooked_allocation_) == 57);
    static_assert(offsetof(Buffer, address_) == 64);
    static_assert(offsetof(Buffer, page_size_) == 72);
    static_assert(static_cast<int>(AllocationStatus::ALLOCATED) == 2);
#elif defined(TT_REPLICA_LAYOUT_UNKNOWN)
    static_assert(offsetof(Buffer, address_) == 16);
    static_assert(offsetof(Buffer, page_size_) == 24);
    static_assert(offsetof(Buffer, allocation_status_) == 32);
    static_assert(offsetof(Buffer, hooked_allocation_) == 33);
    static_assert(offsetof(Buffer, owns_data_) == 34);
    static_assert(offsetof(Buffer, buffer_type_) == 40);
    static_assert(offsetof(Buffer, device_) == 48);
    static_assert(offsetof(Buffer, size_) == 56);
#else
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
#endif
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
#ifdef TT_REPLICA_LAYOUT_V2
    : impl_(std::make_unique<BufferImpl>()) {
    BufferImpl& m = *impl_;
    m.device_ = device;
    m.size_ = size;
    m.buffer_type_ = buffer_type;
    m.buffer_layout_ = buffer_layout;
    m.bottom_up_ = bottom_up.value_or(device->allocator()->default_bottom_up(buffer_type));
    m.sub_device_id_ = sub_device_id ? std::optional<uint8_t>(sub_device_id->id) : std::nullopt;
    m.owns_data_ = owns_data;
    m.sub_device_manager_id_ = std::nullopt;
    m.allocator_ = device->allocator();
    m.allocation_status_ = AllocationStatus::ALLOCATION_REQUESTED;
    m.hooked_allocation_ = false;
    m.address_ = 0;
    m.page_size_ = page_size;
    m.unique_id_ = g_next_buffer_id.fetch_add(1, std::memory_order_relaxed);
    m.alloc_epoch_ = 0;
    m.shard_cores_ = 0;
    dirty_type_padding(&m.buffer_type_);
}
#else
    : device_(device),
      size_(size),
      buffer_type_(buffer_type),
      buffer_layout_(buffer_layout),
      bottom_up_(bottom_up.value_or(device->allocator()->default_bottom_up(buffer_type))),
      sub_device_id_(sub_device_id ? std::optional<uint8_t>(sub_device_id->id) : std::nullopt),
      owns_data_(owns_data),
      sub_device_manager_id_(std::nullopt),
      allocator_(device->allocator()),
      allocation_status_(AllocationStatus::ALLOCATION_REQUESTED),
      hooked_allocation_(false),
      address_(0),
      page_size_(page_size),
      unique_id_(g_next_buffer_id.fetch_add(1, std::memory_order_relaxed)),
      alloc_epoch_(0),
      shard_cores_(0) {
    dirty_type_padding(&buffer_type_);
}
#endif

#ifdef TT_REPLICA_PIMPL2
// pimpl-2: Buffer::create forwards to BufferImpl::create (upstream buffer_pimpl.cpp).
std::shared_ptr<Buffer> Buffer::create(IDevice* device,
                                       DeviceAddr size,
                                       DeviceAddr page_size,
                                       BufferType buffer_type,
                                       const BufferShardingArgs& sharding_args,
                                       std::optional<bool> bottom_up,
                                       std::optional<SubDeviceId> sub_device_id) {
    return BufferImpl::create(device, size, page_size, buffer_type, sharding_args, bottom_up, sub_device_id);
}

std::shared_ptr<Buffer> BufferImpl::create(IDevice* device,
                                           DeviceAddr size,
                                           DeviceAddr page_size,
                                           BufferType buffer_type,
                                           const BufferShardingArgs& sharding_args,
                                           std::optional<bool> bottom_up,
                                           std::optional<SubDeviceId> sub_device_id) {
    auto buffer = std::make_shared<Buffer>(Buffer::Private{}, device, size, page_size, buffer_type,
                                           sharding_args.buffer_layout, bottom_up, sub_device_id, true);
    BufferImpl& m = *buffer->impl_;
    if (sharding_args.buffer_layout != TensorMemoryLayout::INTERLEAVED) m.shard_cores_ = sharding_args.shard_cores;
    if (m.size_ == 0) {
        m.allocation_status_ = AllocationStatus::ALLOCATED;
        return buffer;
    }
    m.allocate_impl(*buffer);
    return buffer;
}

// The buffer-allocation observers, notified after track_*: none is registered here.
__attribute__((noinline)) void notify_buffer_allocated(const Buffer* buffer) { asm volatile("" ::"r"(buffer)); }
__attribute__((noinline)) void notify_buffer_deallocated(Buffer* buffer) { asm volatile("" ::"r"(buffer)); }
#else
std::shared_ptr<Buffer> Buffer::create(IDevice* device,
                                       DeviceAddr size,
                                       DeviceAddr page_size,
                                       BufferType buffer_type,
                                       const BufferShardingArgs& sharding_args,
                                       std::optional<bool> bottom_up,
                                       std::optional<SubDeviceId> sub_device_id) {
    auto buffer = std::make_shared<Buffer>(Private{}, device, size, page_size, buffer_type,
                                           sharding_args.buffer_layout, bottom_up, sub_device_id, true);
    if (sharding_args.buffer_layout != TensorMemoryLayout::INTERLEAVED) buffer->f().shard_cores_ = sharding_args.shard_cores;
    if (buffer->f().size_ == 0) {
        buffer->f().allocation_status_ = AllocationStatus::ALLOCATED;
        return buffer;
    }
    buffer->allocate_impl();
    return buffer;
}

#endif

TT_VIEW_CREATE std::shared_ptr<Buffer> Buffer::create(IDevice* device,
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
#ifdef TT_REPLICA_PIMPL2
    return BufferImpl::create(device, address, size, page_size, buffer_type, sharding_args, bottom_up, sub_device_id);
}

std::shared_ptr<Buffer> BufferImpl::create(IDevice* device,
                                           DeviceAddr address,
                                           DeviceAddr size,
                                           DeviceAddr page_size,
                                           BufferType buffer_type,
                                           const BufferShardingArgs& sharding_args,
                                           std::optional<bool> bottom_up,
                                           std::optional<SubDeviceId> sub_device_id) {
    auto buffer = std::make_shared<Buffer>(Buffer::Private{}, device, size, page_size, buffer_type,
                                           sharding_args.buffer_layout, bottom_up, sub_device_id, false);
#else
    auto buffer = std::make_shared<Buffer>(Private{}, device, size, page_size, buffer_type,
                                           sharding_args.buffer_layout, bottom_up, sub_device_id, false);
#endif
    buffer->f().address_ = address;
    buffer->f().allocation_status_ = AllocationStatus::ALLOCATED;
    return buffer;
}

std::shared_ptr<Buffer> Buffer::view(const BufferRegion& region) {
    replica::count_call(replica::kBufferView);
    return create(f().device_, f().address_ + region.offset, region.size, f().page_size_, f().buffer_type_);
}

#ifdef TT_REPLICA_PIMPL2
// pimpl-2: the same lifecycle, BufferImpl's, with the Buffer by reference; the observers are
// notified after the tracker (upstream's newest buffer.cpp).
void BufferImpl::allocate_impl(Buffer& self) {
    std::lock_guard<std::mutex> lock(replica::mem_mutex());
    GraphTracker& tracker = GraphTracker::instance();
    if (tracker.hook_allocate(&self)) {
        address_ = 0;
        hooked_allocation_ = true;
    } else {
        address_ = allocator_->allocate_buffer(&self);  // throws on out-of-memory
    }
    alloc_epoch_ = replica::attach_epoch();
    allocation_status_ = AllocationStatus::ALLOCATED;
    replica::ops_note_alloc(&self);
    TT_TRACK_ALLOCATE(tracker, &self);
    notify_buffer_allocated(&self);
}

void BufferImpl::deallocate(Buffer& self) {
    if (!owns_data_) return;
    deallocate_impl(self);
}

void BufferImpl::deallocate_impl(Buffer& self) {
    std::lock_guard<std::mutex> lock(replica::mem_mutex());
    if (allocation_status_ != AllocationStatus::ALLOCATED) return;
    if (device_->is_initialized() && size_ != 0) {
        TT_TRACK_DEALLOCATE(GraphTracker::instance(), &self);
        notify_buffer_deallocated(&self);
        if (alloc_epoch_ < replica::attach_epoch()) replica::note_unknown_free(size_);
        if (!hooked_allocation_) allocator_->deallocate_buffer(&self);
    } else if (size_ != 0) {
        replica::count_call(replica::kDeallocateOnClosedDevice);
    }
    allocation_status_ = AllocationStatus::DEALLOCATED;
}

void Buffer::deallocate() { impl_->deallocate(*this); }

// Upstream's pimpl-2 makes BufferImpl::mark_as_deallocated inline; the replica keeps Buffer's
// out of line (the workloads and MeshBuffer call it), so its probe still sees every mark.
void Buffer::mark_as_deallocated() {
    replica::count_call(replica::kMarkAsDeallocated);
    impl_->allocation_status_ = AllocationStatus::DEALLOCATED;
}

Buffer::~Buffer() {
    if (impl_->allocation_status_ != AllocationStatus::DEALLOCATED) impl_->deallocate(*this);
}
#else
TT_PROBED TT_LIFECYCLE void Buffer::allocate_impl() {
    // Replica: one lock across allocator + tracker, so the tracked order is the truth's order.
    std::lock_guard<std::mutex> lock(replica::mem_mutex());
    Fields& m = f();
    GraphTracker& tracker = GraphTracker::instance();
    if (tracker.hook_allocate(this)) {
        m.address_ = 0;
        m.hooked_allocation_ = true;
    } else {
        m.address_ = m.allocator_->allocate_buffer(this);  // throws on out-of-memory
    }
    m.alloc_epoch_ = replica::attach_epoch();
    m.allocation_status_ = AllocationStatus::ALLOCATED;
    // Before the tracker's call: the function keeps the shape of
    // upstream's, whose end is the tracker's (an inlined tracker: two
    // exits, which the lifecycle plan probes with one program).
    replica::ops_note_alloc(this);
    TT_TRACK_ALLOCATE(tracker, this);
}

TT_PROBED TT_LIFECYCLE void Buffer::deallocate() {
    if (!f().owns_data_) return;
    deallocate_impl();
}

TT_PROBED TT_LIFECYCLE void Buffer::deallocate_impl() {
    std::lock_guard<std::mutex> lock(replica::mem_mutex());
    Fields& m = f();
    if (m.allocation_status_ != AllocationStatus::ALLOCATED) return;
    if (m.device_->is_initialized() && m.size_ != 0) {
        TT_TRACK_DEALLOCATE(GraphTracker::instance(), this);
        if (m.alloc_epoch_ < replica::attach_epoch()) replica::note_unknown_free(m.size_);
        if (!m.hooked_allocation_) m.allocator_->deallocate_buffer(this);
    } else if (m.size_ != 0) {
        // Upstream skips the tracker here (the device was closed first): a tracer that sees the
        // call itself (tttrace's lifecycle probes) sees a free the tracker does not.
        replica::count_call(replica::kDeallocateOnClosedDevice);
    }
    m.allocation_status_ = AllocationStatus::DEALLOCATED;
}

TT_PROBED void Buffer::mark_as_deallocated() {
    replica::count_call(replica::kMarkAsDeallocated);
    f().allocation_status_ = AllocationStatus::DEALLOCATED;
}

Buffer::~Buffer() {
    if (f().allocation_status_ != AllocationStatus::DEALLOCATED) deallocate();
}

#endif

DeviceAddr Buffer::address() const { return f().address_; }
bool Buffer::is_allocated() const { return f().allocation_status_ == AllocationStatus::ALLOCATED; }
DeviceAddr Buffer::page_size() const { return f().page_size_; }

std::optional<uint32_t> Buffer::num_cores() const {
    if (f().buffer_layout_ == TensorMemoryLayout::INTERLEAVED || f().shard_cores_ == 0) return std::nullopt;
    return f().shard_cores_;
}
// Out of line in every upstream design, also where buffer_type() is inline (V0, V1): their
// compares read buffer_type_ at its width (tttrace learns the width there without DWARF).
bool Buffer::is_trace() const { return f().buffer_type_ == BufferType::TRACE; }
bool Buffer::is_dram() const { return f().buffer_type_ == BufferType::DRAM || f().buffer_type_ == BufferType::TRACE; }
bool Buffer::is_l1() const { return f().buffer_type_ == BufferType::L1 || f().buffer_type_ == BufferType::L1_SMALL; }
#if defined(TT_REPLICA_LAYOUT_V2)
DeviceAddr Buffer::size() const { return impl_->size_; }
IDevice* Buffer::device() const { return impl_->device_; }
BufferType Buffer::buffer_type() const { return impl_->buffer_type_; }
TensorMemoryLayout Buffer::buffer_layout() const { return impl_->buffer_layout_; }
bool Buffer::bottom_up() const { return impl_->bottom_up_; }
bool Buffer::owns_data() const { return impl_->owns_data_; }
bool Buffer::hooked_allocation() const { return impl_->hooked_allocation_; }
AllocationStatus Buffer::allocation_status() const { return impl_->allocation_status_; }
uint64_t Buffer::unique_id() const { return impl_->unique_id_; }
#elif defined(TT_REPLICA_OUTOFLINE_SIZE)
DeviceAddr Buffer::size() const { return size_; }
#endif

}  // namespace tt::tt_metal
