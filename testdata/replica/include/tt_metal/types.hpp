// Replica of the parts of TT-Metal's public types that tttrace reads.
// Written from the published facts (docs/ttmetal.md), not from upstream code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

// CoreCoord / CoreRange / CoreRangeSet live in the GLOBAL namespace (as upstream before 2026),
// which is visible in the mangled name of GraphTracker::track_allocate_cb (RK12CoreRangeSet).
// CORE_NS=1 (TT_REPLICA_CORE_NS): in tt::tt_metal, as 2026's tt-metalium/core_coord.hpp declares
// them (RKNS0_12CoreRangeSetE), used unqualified through using-declarations.
#ifdef TT_REPLICA_CORE_NS
namespace tt::tt_metal {
#endif
struct CoreCoord {
    std::size_t x = 0;
    std::size_t y = 0;
};

struct CoreRange {
    CoreCoord start_coord;
    CoreCoord end_coord;
    CoreRange() = default;
    CoreRange(CoreCoord start, CoreCoord end) : start_coord(start), end_coord(end) {}
    std::size_t size() const {
        return (end_coord.x - start_coord.x + 1) * (end_coord.y - start_coord.y + 1);
    }
};

class CoreRangeSet {
public:
    CoreRangeSet() = default;
    CoreRangeSet(CoreRange range) : ranges_{range} {}
    explicit CoreRangeSet(std::vector<CoreRange> ranges) : ranges_(std::move(ranges)) {}
    const std::vector<CoreRange>& ranges() const { return ranges_; }
    std::size_t num_cores() const {
        std::size_t n = 0;
        for (const auto& r : ranges_) n += r.size();
        return n;
    }

private:
    std::vector<CoreRange> ranges_;
};
#ifdef TT_REPLICA_CORE_NS
}  // namespace tt::tt_metal
using tt::tt_metal::CoreCoord;
using tt::tt_metal::CoreRange;
using tt::tt_metal::CoreRangeSet;
#endif

namespace tt {

enum class ARCH : int { Invalid = 0, GRAYSKULL = 1, WORMHOLE_B0 = 2, BLACKHOLE = 3 };

namespace tt_metal {

using DeviceAddr = uint64_t;

#ifdef TT_REPLICA_TYPE_U8
// TYPE_U8=1: a one-byte BufferType, as some upstream builds have; the three bytes after
// buffer_type_ are padding, and the replica fills them with garbage (src/buffer.cpp).
enum class BufferType : uint8_t {
#else
enum class BufferType : int {
#endif
    DRAM = 0,
    L1 = 1,
    SYSTEM_MEMORY = 2,
    L1_SMALL = 3,
    TRACE = 4,
};
inline constexpr int kNumBufferTypes = 5;

#ifdef TT_REPLICA_LAYOUT_V0
// V0 (late 2024): four states, ALLOCATED is 2.
enum class AllocationStatus : uint8_t {
    ALLOCATION_REQUESTED = 0,
    ALLOCATION_FAILED = 1,
    ALLOCATED = 2,
    DEALLOCATED = 3,
};
#else
enum class AllocationStatus : uint8_t {
    ALLOCATION_REQUESTED = 0,
    ALLOCATED = 1,
    DEALLOCATED = 2,
};
#endif

enum class TensorMemoryLayout : int {
    INTERLEAVED = 0,
    HEIGHT_SHARDED = 2,
    WIDTH_SHARDED = 3,
    BLOCK_SHARDED = 4,
};

struct SubDeviceId {
    uint8_t id = 0;
};

struct BufferShardingArgs {
    TensorMemoryLayout buffer_layout = TensorMemoryLayout::INTERLEAVED;
    // Replica stand-in for the shard spec: the number of cores of the shard grid (sharded
    // layouts only; Buffer::num_cores()).
    uint32_t shard_cores = 0;
};

// "DRAM", "L1", "SYSTEM_MEMORY", "L1_SMALL", "TRACE".
const char* buffer_type_name(BufferType type);

}  // namespace tt_metal
}  // namespace tt
