// tt::tt_metal::GraphTracker: the functions tttrace puts its entry uprobes on.
// Implemented in its own translation unit (src/graph_tracking.cpp), out of line.
#pragma once

#include <atomic>
#include <cstdint>

#include "tt_metal/types.hpp"

namespace tt::tt_metal {

class Buffer;
class IDevice;

class GraphTracker {
public:
    enum Kind : int { kAllocate = 0, kDeallocate = 1, kAllocateCb = 2, kDeallocateCb = 3, kNumKinds = 4 };

    static GraphTracker& instance();

    void track_allocate(const Buffer* buffer);
    void track_deallocate(Buffer* buffer);
    void track_allocate_cb(const CoreRangeSet& core_range_set,
                           uint64_t addr,
                           uint64_t size,
                           bool is_globally_allocated,
                           const IDevice* device);
    void track_deallocate_cb(const IDevice* device);
#ifdef TT_REPLICA_INLINE_TRACKER
    // INLINE_TRACKER=1 builds: the bodies of track_allocate / track_deallocate, inlined into
    // Buffer's allocate_impl / deallocate_impl (src/graph_tracking_inline.hpp), as LTO can do.
    // The exported out-of-line functions above stay, and are no longer called from the library.
    inline void track_allocate_inline(const Buffer* buffer);
    inline void track_deallocate_inline(Buffer* buffer);
#endif

    // True while a graph capture is active: allocate_impl then skips the allocator.
    bool hook_allocate(const Buffer* buffer);
    void begin_capture();
    void end_capture();

    uint64_t count(Kind kind) const;
    // Replica-only: restart the counts (the ground truth's attach point).
    void reset_counts();
    uint64_t tracked_bytes() const;

private:
    GraphTracker() = default;

    std::atomic<uint64_t> counts_[kNumKinds] = {};
    std::atomic<uint64_t> bytes_{0};
    std::atomic<int> capture_depth_{0};
    std::atomic<uint64_t> hooked_{0};
    std::atomic<const void*> last_{nullptr};
};

}  // namespace tt::tt_metal
