// INLINE_TRACKER=1 builds: GraphTracker::track_allocate / track_deallocate as an LTO build can
// leave them, their bodies inlined into Buffer::allocate_impl / deallocate_impl. Same effect as
// the out-of-line functions in graph_tracking.cpp (which stay exported, and uncalled).
#pragma once

#include "tt_metal/buffer.hpp"
#include "tt_metal/graph_tracking.hpp"

namespace tt::tt_metal {

__attribute__((always_inline)) inline void GraphTracker::track_allocate_inline(const Buffer* buffer) {
    if (buffer == nullptr) return;
    last_.store(buffer, std::memory_order_relaxed);
    counts_[kAllocate].fetch_add(1, std::memory_order_relaxed);
    if (buffer->hooked_allocation()) hooked_.fetch_add(1, std::memory_order_relaxed);
}

__attribute__((always_inline)) inline void GraphTracker::track_deallocate_inline(Buffer* buffer) {
    if (buffer == nullptr) return;
    last_.store(buffer, std::memory_order_relaxed);
    counts_[kDeallocate].fetch_add(1, std::memory_order_relaxed);
}

}  // namespace tt::tt_metal
