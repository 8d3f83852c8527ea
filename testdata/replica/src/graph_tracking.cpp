// GraphTracker: its own translation unit (as upstream graph/graph_tracking.cpp), so calls to
// track_* are never inlined into their callers (without LTO).
#include "tt_metal/graph_tracking.hpp"

#include "tt_metal/buffer.hpp"
#include "tt_metal/device.hpp"
#include "reporter.hpp"

namespace tt::tt_metal {

GraphTracker& GraphTracker::instance() {
    static GraphTracker* tracker = new GraphTracker();  // never destroyed
    return *tracker;
}

// Each track_* tests its argument first, so the entry instruction is never a lock-prefixed
// atomic (which a uprobe cannot single-step), then counts the call.

void GraphTracker::track_allocate(const Buffer* buffer) {
    if (buffer == nullptr) return;
    last_.store(buffer, std::memory_order_relaxed);
    counts_[kAllocate].fetch_add(1, std::memory_order_relaxed);
    if (buffer->hooked_allocation()) hooked_.fetch_add(1, std::memory_order_relaxed);
    TT_REPLICA_REPORT(1, buffer);
}

void GraphTracker::track_deallocate(Buffer* buffer) {
    if (buffer == nullptr) return;
    last_.store(buffer, std::memory_order_relaxed);
    counts_[kDeallocate].fetch_add(1, std::memory_order_relaxed);
    TT_REPLICA_REPORT(2, buffer);
}

void GraphTracker::track_allocate_cb(const CoreRangeSet& core_range_set,
                                     uint64_t addr,
                                     uint64_t size,
                                     bool is_globally_allocated,
                                     const IDevice* device) {
    if (device == nullptr) return;
    last_.store(&core_range_set, std::memory_order_relaxed);
    counts_[kAllocateCb].fetch_add(1, std::memory_order_relaxed);
    if (!is_globally_allocated && addr != 0) bytes_.fetch_add(size, std::memory_order_relaxed);
}

void GraphTracker::track_deallocate_cb(const IDevice* device) {
    if (device == nullptr) return;
    last_.store(device, std::memory_order_relaxed);
    counts_[kDeallocateCb].fetch_add(1, std::memory_order_relaxed);
}

bool GraphTracker::hook_allocate(const Buffer* buffer) {
    if (buffer == nullptr) return false;
    return capture_depth_.load(std::memory_order_acquire) > 0;
}

void GraphTracker::begin_capture() { capture_depth_.fetch_add(1, std::memory_order_acq_rel); }
void GraphTracker::end_capture() { capture_depth_.fetch_sub(1, std::memory_order_acq_rel); }

uint64_t GraphTracker::count(Kind kind) const { return counts_[kind].load(std::memory_order_relaxed); }

void GraphTracker::reset_counts() {
    for (auto& c : counts_) c.store(0, std::memory_order_relaxed);
}
uint64_t GraphTracker::tracked_bytes() const { return bytes_.load(std::memory_order_relaxed); }

}  // namespace tt::tt_metal
