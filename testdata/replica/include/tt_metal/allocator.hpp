// The allocators, in upstream's shapes (docs/ttmetal.md §9): per chip one allocator owning a
// BankManager per buffer type, each a first-fit free list over one bank's address space in
// which every allocation reserves the same per-bank span in all banks (lockstep). BankManager's
// two constructors and allocate_buffer have upstream's declarations, hence its mangled names
// (tttrace probes them). A MeshDevice has an allocator of its own, as upstream's, built from its
// reference chip's config through the same constructors; the chips' allocators never hold mesh
// buffers. Allocations change the ground truth here.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "tt_metal/types.hpp"

// ttsl::StrongType (tt_stl/strong_type.hpp), as far as its mangled name and ABI go: a
// trivially copyable wrapper of one value.
namespace ttsl {
template <typename T, typename Tag>
class StrongType {
public:
    constexpr StrongType() = default;
    constexpr explicit StrongType(T v) : value_(v) {}
    constexpr T get() const { return value_; }

private:
    T value_{};
};

// ttsl::SmallVector (upstream: an alias of llvm::SmallVector<T, 8>, tt_stl/small_vector.hpp) as
// far as a reader of memory goes: llvm's SmallVectorBase<uint32_t>, the data pointer then a
// 32-bit size and capacity. (Here the elements live in a std::vector after them.)
template <typename T>
class SmallVector {
public:
    SmallVector() = default;
    SmallVector(const SmallVector&) = delete;
    SmallVector& operator=(const SmallVector&) = delete;
    void resize(std::size_t n) {
        store_.resize(n);
        data_ = store_.data();
        size_ = static_cast<uint32_t>(store_.size());
        capacity_ = static_cast<uint32_t>(store_.capacity());
    }
    std::size_t size() const { return size_; }
    T& operator[](std::size_t i) { return data_[i]; }
    const T& operator[](std::size_t i) const { return data_[i]; }

private:
    T* data_ = nullptr;
    uint32_t size_ = 0;
    uint32_t capacity_ = 0;
    std::vector<T> store_;
};
}  // namespace ttsl

namespace tt::tt_metal {

class Buffer;
class Device;
class IDevice;

// Which chip the allocator's numbers are shaped like (docs/ttmetal.md §9, soc descriptors).
enum class ChipShape : int {
    Flat = 0,   // the replica's own: one bank per type, every type based at 0x10000 (default)
    N150,       // Wormhole B0: 12 DRAM banks of 1 GiB, 64 L1 banks (8x8 compute grid)
    N300,       // Wormhole B0, as N150 per chip (an n300 is two of them)
    Galaxy,     // Wormhole B0 unharvested: 12 DRAM banks, 80 L1 banks (8x10)
    Blackhole,  // 8 DRAM banks of 4278190080 B, 130 L1 banks (13x10), DRAM alignment 64
};
const char* chip_shape_name(ChipShape shape);
std::optional<ChipShape> chip_shape_from_name(const std::string& name);

struct AllocatorConfig {
    ChipShape shape = ChipShape::Flat;

    // Flat shape only: per type one bank of `capacity` bytes at `base`, alignment `alignment`.
    // Same base for DRAM, L1 and L1_SMALL, so buffers of different types share addresses.
    DeviceAddr base[kNumBufferTypes] = {0x10000, 0x10000, 0x10000, 0x10000, 0x10000};
    DeviceAddr capacity[kNumBufferTypes] = {
        1ull << 30,  // DRAM 1 GiB
        1ull << 20,  // L1 1 MiB
        1ull << 28,  // SYSTEM_MEMORY 256 MiB (no BankManager upstream: a private free list)
        1ull << 16,  // L1_SMALL 64 KiB
        1ull << 24,  // TRACE 16 MiB
    };
    uint32_t alignment = 32;
    // Flat shape: L1 buffers default to bottom-up (the replica's historical layout, which the
    // CB clash scenarios are written for). Shaped chips: false, as upstream.
    bool l1_bottom_up_default = true;

    // Shaped chips: L1BankingAllocator::generate_config's fields.
    uint32_t num_dram_channels = 0;
    DeviceAddr dram_bank_size = 0;
    std::vector<int64_t> dram_bank_offsets;
    DeviceAddr dram_unreserved_base = 0;
    uint32_t dram_alignment = 32;
    DeviceAddr l1_unreserved_base = 0;
    uint32_t num_l1_banks = 0;  // compute-and-storage cores
    DeviceAddr worker_l1_size = 0;
    DeviceAddr l1_small_size = 0;
    DeviceAddr trace_region_size = 0;
    uint32_t l1_alignment = 16;
    CoreRangeSet compute_grid;
    // AllocatorMode::HYBRID (upstream: TT_METAL_ALLOCATOR_MODE_HYBRID=1): the L1 bank manager
    // has one more free list per bank (allocator id bank + 1) for per-core buffers.
    bool hybrid = false;

    // The config of a chip shaped like `shape` (Flat: the default above).
    static AllocatorConfig shaped(ChipShape shape);
};

// allocator_types.hpp's Statistics: every number per bank.
struct Statistics {
    uint64_t total_allocatable_size_bytes = 0;
    uint64_t total_allocated_bytes = 0;
    uint64_t total_free_bytes = 0;
    uint64_t largest_free_block_bytes = 0;
};

namespace allocator {
// Upstream's allocator::Algorithm (algorithms/allocator_algorithm.hpp): polymorphic, its members
// in upstream's order (a tracer attached late reads them from memory, offsets from DWARF).
class Algorithm {
public:
    Algorithm() = default;
    Algorithm(DeviceAddr max_size_bytes, DeviceAddr offset_bytes, DeviceAddr min_allocation_size, DeviceAddr alignment)
        : max_size_bytes_(max_size_bytes),
          offset_bytes_(offset_bytes),
          min_allocation_size_(min_allocation_size),
          alignment_(alignment) {}
    virtual ~Algorithm();

protected:
    DeviceAddr max_size_bytes_ = 0;
    DeviceAddr offset_bytes_ = 0;
    DeviceAddr min_allocation_size_ = 32;
    DeviceAddr alignment_ = 32;
    DeviceAddr shrink_size_ = 0;
    std::optional<DeviceAddr> lowest_occupied_address_;
};

// First fit by address over [0, max_size) (relative), returned plus offset; upstream's
// FreeListOpt with SearchPolicy::FIRST in behaviour. Its block list is kept in upstream's
// shape too (algorithms/free_list_opt.hpp: SoA vectors, blocks chained by prev/next index,
// meta slots reused), rebuilt from the replica's own map after every change: that is what a
// tracer attached late reads; the map is what the replica decides with and its truth reads.
class FreeListOpt : public Algorithm {
public:
    FreeListOpt() = default;
    FreeListOpt(DeviceAddr max_size, DeviceAddr offset, DeviceAddr min_allocation_size, DeviceAddr alignment);
    ~FreeListOpt() override;

    DeviceAddr align(DeviceAddr size) const;
    // The span an allocation of `size` takes: align(max(size, min_allocation_size)).
    DeviceAddr alloc_size(DeviceAddr size) const;
    // Bottom-up: lowest-addressed free block that fits, at its start; top-down: the
    // highest-addressed one, at its end - span. Absolute address or nullopt.
    std::optional<DeviceAddr> allocate(DeviceAddr size, bool bottom_up);
    // Absolute address where `span` bytes are free, lowest >= from (bottom-up) or highest with
    // end <= to (top-down); nothing changes.
    std::optional<DeviceAddr> find_from(DeviceAddr from, DeviceAddr span) const;
    std::optional<DeviceAddr> find_below(DeviceAddr to, DeviceAddr span) const;
    // Reserve [addr, addr+span) (absolute), which must lie in one free block.
    bool allocate_at(DeviceAddr addr, DeviceAddr span);
    // First fit as allocate(), in free space not overlapping `blocked` (absolute [start, end)
    // ranges of dependent allocators), as upstream's BankManager with dependencies.
    std::optional<DeviceAddr> allocate_avoiding(DeviceAddr size, bool bottom_up,
                                                std::vector<std::pair<DeviceAddr, DeviceAddr>> blocked);
    // The allocated blocks, absolute [start, end).
    std::vector<std::pair<DeviceAddr, DeviceAddr>> allocated_ranges() const;
    // The free space not overlapping `blocked` (sorted, absolute [start, end)), in address
    // order: what allocate_avoiding chooses from.
    std::vector<std::pair<DeviceAddr, DeviceAddr>> free_rooms(
        const std::vector<std::pair<DeviceAddr, DeviceAddr>>& blocked) const;
    // Free the block at absolute `addr` and merge it with free neighbours; false if unknown.
    bool deallocate(DeviceAddr addr);
    void clear();
    Statistics get_statistics() const;
    std::optional<DeviceAddr> lowest_occupied_address() const;
    DeviceAddr max_size() const { return max_size_bytes_; }
    DeviceAddr offset() const { return offset_bytes_; }
    DeviceAddr alignment() const { return alignment_; }

private:
    // Rebuild the SoA image of blocks_ (upstream's shape), reusing slots as upstream's
    // alloc_meta_block / free_meta_block do: a slot no block uses keeps stale data and
    // meta_block_is_allocated_ 0.
    void mirror();

    // upstream's members, in its order
    std::vector<DeviceAddr> block_address_;
    std::vector<DeviceAddr> block_size_;
    std::vector<ssize_t> block_prev_block_;
    std::vector<ssize_t> block_next_block_;
    std::vector<uint8_t> block_is_allocated_;
    std::vector<uint8_t> meta_block_is_allocated_;
    std::vector<size_t> free_meta_block_indices_;

    struct Block {
        DeviceAddr size;
        bool allocated;
    };
    std::map<DeviceAddr, Block> blocks_;  // relative address -> block; they tile [0, max_size)
};
using FreeList = FreeListOpt;
}  // namespace allocator

// Upstream: ceil(size / page_size / num_banks) pages x page_size rounded up to the alignment
// (allocator.hpp, detail::calculate_bank_size_spread).
DeviceAddr calculate_bank_size_spread(DeviceAddr size, DeviceAddr page_size, uint32_t num_banks, uint32_t alignment);

class BankManager {
public:
    struct AllocatorDependencies {
        using AllocatorID = ttsl::StrongType<uint32_t, struct AllocatorIDTag>;
        AllocatorDependencies() : count(1) {}
        // Replica: allocator 0 and n - 1 others, each dependent on 0 only (HYBRID's shape).
        explicit AllocatorDependencies(uint32_t n) : count(n ? n : 1) {}
        uint32_t num_allocators() const { return count; }
        uint32_t count;
    };

    BankManager() = default;
    // DRAM and TRACE: one bank per entry of bank_offsets.
    BankManager(const BufferType& buffer_type,
                const std::vector<int64_t>& bank_offsets,
                DeviceAddr size_bytes,
                uint32_t alignment_bytes,
                DeviceAddr alloc_offset = 0,
                bool disable_interleaved = false,
                const AllocatorDependencies& dependencies = AllocatorDependencies());
    // L1 and L1_SMALL: bank id -> offset.
    BankManager(const BufferType& buffer_type,
                const std::unordered_map<uint32_t, int64_t>& bank_id_to_bank_offset,
                DeviceAddr size_bytes,
                DeviceAddr interleaved_address_limit,
                uint32_t alignment_bytes,
                DeviceAddr alloc_offset = 0,
                bool disable_interleaved = false,
                const AllocatorDependencies& dependencies = AllocatorDependencies());

    uint32_t num_banks() const { return static_cast<uint32_t>(bank_id_to_bank_offset_.size()); }
    DeviceAddr bank_size() const { return free_list().max_size(); }
    DeviceAddr base() const { return free_list().offset(); }
    uint32_t alignment() const { return alignment_bytes_; }
    BufferType buffer_type() const { return buffer_type_; }
    const allocator::FreeList& free_list() const { return static_cast<const allocator::FreeList&>(*allocators_[0]); }

    // Throws std::runtime_error "Out of Memory: ..." (upstream's wording, with statistics) when
    // no free block fits; nothing changes then. Records the failure in the ground truth.
    DeviceAddr allocate_buffer(DeviceAddr size,
                               DeviceAddr page_size,
                               bool bottom_up,
                               const CoreRangeSet& compute_grid,
                               std::optional<uint32_t> num_shards,
                               AllocatorDependencies::AllocatorID allocator_id = AllocatorDependencies::AllocatorID{0});
    void deallocate_buffer(DeviceAddr address,
                           AllocatorDependencies::AllocatorID allocator_id = AllocatorDependencies::AllocatorID{0});
    void clear() { mutable_free_list().clear(); }
    Statistics get_statistics() const { return free_list().get_statistics(); }

    // The span the free list takes for a request.
    DeviceAddr span_for(DeviceAddr size, DeviceAddr page_size, std::optional<uint32_t> num_shards) const;
    allocator::FreeList& mutable_free_list() { return static_cast<allocator::FreeList&>(*allocators_[0]); }

    // The chip or the mesh this manager belongs to, for the truth's failure records (-1 = none).
    void set_chip(int chip) { chip_ = chip; }
    void set_mesh(int mesh_id, const void* mesh_device) {
        mesh_ = mesh_id;
        mesh_device_ = mesh_device;
    }

private:
    // As upstream: the free list's alignment is the HAL's DRAM alignment for every manager.
    void init_allocators(DeviceAddr size_bytes, uint32_t alignment_bytes, DeviceAddr offset);
    // HYBRID: first fit in allocator `id`'s list, avoiding its dependent lists' blocks.
    std::optional<DeviceAddr> allocate_dependent(uint32_t id, DeviceAddr size_per_bank, bool bottom_up);
    // HYBRID: the blocks of the lists allocator `id` avoids (sorted, absolute).
    std::vector<std::pair<DeviceAddr, DeviceAddr>> blocked_for(uint32_t id) const;
    // HYBRID: one bank as per-core allocator `id` (bank id - 1) sees it through the lockstep
    // list: allocated = both lists' blocks, free and largest free block = the room neither holds.
    Statistics dependent_statistics(uint32_t id) const;

    // Upstream's members (bank_manager.hpp), in its order; the bank count is the map's size.
    BufferType buffer_type_ = BufferType::DRAM;
    std::unordered_map<uint32_t, int64_t> bank_id_to_bank_offset_;
    DeviceAddr interleaved_address_limit_ = 0;
    uint32_t alignment_bytes_ = 32;
    AllocatorDependencies allocator_dependencies_;
    ttsl::SmallVector<std::unique_ptr<allocator::Algorithm>> allocators_;
    int chip_ = -1;
    int mesh_ = -1;
    const void* mesh_device_ = nullptr;
};

// The request an allocator makes of its bank manager for a buffer (upstream
// AllocatorImpl::allocate_buffer: aligned size, aligned page size, bottom_up, shard count).
struct BankRequest {
    DeviceAddr size;       // aligned_size
    DeviceAddr page_size;  // aligned_page_size
    bool bottom_up;
    std::optional<uint32_t> num_shards;
};
// Alignment of a type's pages under `config` (upstream Allocator::get_alignment).
uint32_t alignment_of(const AllocatorConfig& config, BufferType type);
BankRequest bank_request_for(const AllocatorConfig& config, const Buffer* buffer);
// Upstream L1BankingAllocator's construction: the BankManagers of `config`, in upstream's order
// (DRAM, TRACE, L1, L1_SMALL), on the calling thread. SYSTEM_MEMORY's stays null.
void make_bank_managers(const AllocatorConfig& config, std::unique_ptr<BankManager> (&banks)[kNumBufferTypes]);

class Allocator {
public:
    virtual ~Allocator();
    // Caller holds replica::mem_mutex(). Throws std::runtime_error on out-of-memory, state unchanged.
    virtual DeviceAddr allocate_buffer(Buffer* buffer) = 0;
    // Caller holds replica::mem_mutex().
    virtual void deallocate_buffer(Buffer* buffer) = 0;
    // Buffer's default for bottom_up_ (upstream: DRAM only).
    virtual bool default_bottom_up(BufferType type) const = 0;
    // Alignment of a type's pages (upstream Allocator::get_alignment).
    virtual uint32_t get_alignment(BufferType type) const = 0;
};

// One allocation held by a chip's allocator (ground-truth bookkeeping beside the free lists).
struct AllocatorBlock {
    DeviceAddr aligned_size = 0;  // the span reserved per bank
    DeviceAddr size = 0;          // Buffer::size_ (what ground truth counts)
    const Buffer* owner = nullptr;
    uint64_t epoch = 0;  // replica attach epoch at reservation (midrun scenario)
    uint64_t serial = 0; // order of the reservation among all chips' (trace truth, src/trace.cpp)
    // A mesh buffer: held by the mesh's allocator, noted here because the chip holds it
    // physically (truth, CB clash check, trace hazards); the chip's free lists do not.
    bool mesh = false;
};

class ChipAllocator final : public Allocator {
public:
    ChipAllocator(Device* device, const AllocatorConfig& config);
    ~ChipAllocator() override;

    DeviceAddr allocate_buffer(Buffer* buffer) override;
    void deallocate_buffer(Buffer* buffer) override;
    bool default_bottom_up(BufferType type) const override;
    uint32_t get_alignment(BufferType type) const override;

    // Not for SYSTEM_MEMORY (no BankManager).
    const BankManager& bank(BufferType type) const { return *banks_[static_cast<int>(type)]; }
    BankManager& mutable_bank(BufferType type) { return *banks_[static_cast<int>(type)]; }
    // Allocations the chip holds, by address (what the truth and the CB clash check read):
    // its own and the mesh buffers of its meshes (whose allocators are independent of the
    // chip's, so a chip buffer and a mesh buffer can share an address).
    const std::multimap<DeviceAddr, AllocatorBlock>& blocks(BufferType type) const { return held_[static_cast<int>(type)]; }
    const AllocatorConfig& config() const { return config_; }
    Device* device() const { return device_; }

    using Request = BankRequest;
    Request request_for(const Buffer* buffer) const { return bank_request_for(config_, buffer); }
    // The free list of a type (SYSTEM_MEMORY: the replica's own) and the span a request takes.
    allocator::FreeList& list(BufferType type);
    DeviceAddr span_for(BufferType type, const Request& r) const;

    // Per-core (HYBRID) buffers: the address each shard core (bank) got, the span its bank's
    // list reserves there (the same on each), the buffer's size.
    struct PerCore {
        std::vector<std::pair<uint32_t, DeviceAddr>> cores;
        DeviceAddr span = 0;
        DeviceAddr size = 0;
        uint64_t epoch = 0;
    };
    // The L1 bank of a logical worker core, and the core of a bank (upstream shuffles the bank
    // ids over the cores walked row by row, l1_banking_allocator.cpp; the replica permutes them
    // by a stride coprime with the bank count). -1 / false: not a worker core / no such bank.
    int64_t l1_bank_of_core(std::size_t x, std::size_t y) const;
    bool l1_core_of_bank(uint32_t bank, std::size_t* x, std::size_t* y) const;
    const std::map<const Buffer*, PerCore>& per_core() const { return per_core_; }
    DeviceAddr per_core_bytes() const;

    // Record an allocation placed by the chip's free list (mesh: by its mesh's allocator, the
    // chip's lists untouched) and charge the truth.
    void reserve(BufferType type, DeviceAddr addr, DeviceAddr span, const Buffer* owner, DeviceAddr size, bool mesh = false);
    // Release owner's allocation at addr, if any (from the chip's free list unless a mesh
    // buffer), and credit the truth.
    bool release(BufferType type, DeviceAddr addr, const Buffer* owner);
    // Device::close: drop everything at once.
    void clear();

private:
    Device* device_;
    AllocatorConfig config_;
    // As upstream (std::make_unique): a BankManager's `this` is its identity for the life of
    // the allocator, which is what a tracer keys its requests by. SYSTEM_MEMORY's stays null.
    std::unique_ptr<BankManager> banks_[kNumBufferTypes];
    allocator::FreeList system_;
    std::multimap<DeviceAddr, AllocatorBlock> held_[kNumBufferTypes];
    std::map<const Buffer*, PerCore> per_core_;
};

namespace experimental::per_core_allocation {
// Replica stand-in for upstream's per-core buffer API (tt-metalium/experimental/
// per_core_allocation/buffer.hpp): a sharded L1 buffer whose shard cores each get their own
// address from their bank's free list (HYBRID chips only).
std::shared_ptr<Buffer> create_per_core_buffer(IDevice* device, DeviceAddr size, DeviceAddr page_size, uint32_t shard_cores);
}  // namespace experimental::per_core_allocation

namespace distributed {
class MeshDevice;

// A MeshDevice's own allocator (upstream: the L1BankingAllocator MeshDevice::initialize makes
// from its reference chip's config, docs/ttmetal.md §9): its own BankManagers, built through the
// same constructors on the thread creating the mesh; a mesh buffer is allocated from them
// (BankManager::allocate_buffer), at one address for every chip, and noted on each open chip
// of the mesh (ChipAllocator::reserve with mesh set) for the truth of what the chips hold.
class MeshAllocator final : public Allocator {
public:
    MeshAllocator(MeshDevice* mesh, const AllocatorConfig& config);
    ~MeshAllocator() override;
    DeviceAddr allocate_buffer(Buffer* buffer) override;
    void deallocate_buffer(Buffer* buffer) override;
    bool default_bottom_up(BufferType type) const override;
    uint32_t get_alignment(BufferType type) const override;

    const AllocatorConfig& config() const { return config_; }
    // Not for SYSTEM_MEMORY (no BankManager).
    const BankManager& bank(BufferType type) const { return *banks_[static_cast<int>(type)]; }
    // Mesh buffers held, by address.
    const std::map<DeviceAddr, AllocatorBlock>& blocks(BufferType type) const { return held_[static_cast<int>(type)]; }
    // MeshDevice::close (upstream destroys the allocator then): everything goes.
    void clear();

private:
    MeshDevice* mesh_;
    AllocatorConfig config_;
    std::unique_ptr<BankManager> banks_[kNumBufferTypes];
    allocator::FreeList system_;
    std::map<DeviceAddr, AllocatorBlock> held_[kNumBufferTypes];
};
}  // namespace distributed

}  // namespace tt::tt_metal
