// The allocators (docs/ttmetal.md §9). Every reserve/release charges the ground truth (memory
// really changes here); every failed BankManager::allocate_buffer is recorded in it.
#include "tt_metal/allocator.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "internal.hpp"
#include "tt_metal/buffer.hpp"
#include "tt_metal/device.hpp"

namespace tt::tt_metal {

// ---------------------------------------------------------------------------------------------
// Chip shapes

const char* chip_shape_name(ChipShape shape) {
    switch (shape) {
        case ChipShape::Flat: return "flat";
        case ChipShape::N150: return "n150";
        case ChipShape::N300: return "n300";
        case ChipShape::Galaxy: return "galaxy";
        case ChipShape::Blackhole: return "blackhole";
    }
    return "unknown";
}

std::optional<ChipShape> chip_shape_from_name(const std::string& name) {
    for (ChipShape s : {ChipShape::Flat, ChipShape::N150, ChipShape::N300, ChipShape::Galaxy, ChipShape::Blackhole}) {
        if (name == chip_shape_name(s)) return s;
    }
    return std::nullopt;
}

AllocatorConfig AllocatorConfig::shaped(ChipShape shape) {
    AllocatorConfig c;
    c.shape = shape;
    if (shape == ChipShape::Flat) return c;
    c.l1_bottom_up_default = false;
    // Replica choices (not in the soc descriptors): the reserved bases, L1_SMALL and the trace
    // region, sized like common ttnn settings.
    c.l1_small_size = 32768;
    c.trace_region_size = 16ull << 20;
    c.l1_alignment = 16;
    std::size_t grid_x = 8, grid_y = 8;
    if (shape == ChipShape::Blackhole) {
        // blackhole_140_arch.yaml: 8 DRAM views of 4278190080 B, worker_l1_size 1572864.
        c.num_dram_channels = 8;
        c.dram_bank_size = 4278190080ull;
        c.dram_alignment = 64;
        c.dram_unreserved_base = 64;
        c.worker_l1_size = 1572864;
        c.l1_unreserved_base = 0x19000;
        grid_x = 13;  // 140 Tensix (14x10), one column for dispatch
        grid_y = 10;
    } else {
        // wormhole_b0_80_arch.yaml: 12 DRAM views of 1 GiB, offsets 0 / 1 GiB alternating,
        // worker_l1_size 1499136.
        c.num_dram_channels = 12;
        c.dram_bank_size = 1ull << 30;
        c.dram_alignment = 32;
        c.dram_unreserved_base = 32;
        c.worker_l1_size = 1499136;
        c.l1_unreserved_base = 0x18000;
        if (shape == ChipShape::Galaxy) grid_y = 10;  // unharvested 8x10, dispatch on ethernet
    }
    for (uint32_t ch = 0; ch < c.num_dram_channels; ++ch) {
        c.dram_bank_offsets.push_back(shape == ChipShape::Blackhole ? 0 : (ch % 2) * (1ll << 30));
    }
    c.num_l1_banks = static_cast<uint32_t>(grid_x * grid_y);
    c.compute_grid = CoreRangeSet(CoreRange({0, 0}, {grid_x - 1, grid_y - 1}));
    // The trace region is aligned to dram alignment x views (generate_config).
    const DeviceAddr ta = static_cast<DeviceAddr>(c.dram_alignment) * c.num_dram_channels;
    c.trace_region_size = (c.trace_region_size + ta - 1) / ta * ta;
    return c;
}

// ---------------------------------------------------------------------------------------------
// The free list

namespace allocator {

Algorithm::~Algorithm() = default;

FreeListOpt::FreeListOpt(DeviceAddr max_size, DeviceAddr offset, DeviceAddr min_allocation_size, DeviceAddr alignment)
    : Algorithm(max_size, offset, min_allocation_size, alignment ? alignment : 1) {
    clear();
}

FreeListOpt::~FreeListOpt() = default;

void FreeListOpt::mirror() {
    // Slots in use keep their index while their block keeps its address (as upstream's blocks
    // keep theirs); a slot freed goes to free_meta_block_indices_ and is reused first.
    std::map<DeviceAddr, size_t> old;
    for (size_t i = 0; i < block_address_.size(); ++i) {
        if (meta_block_is_allocated_[i]) old.emplace(block_address_[i], i);
    }
    std::vector<size_t> slot_of;
    slot_of.reserve(blocks_.size());
    std::vector<uint8_t> taken(block_address_.size(), 0);
    for (const auto& [addr, b] : blocks_) {
        auto it = old.find(addr);
        if (it != old.end()) {
            slot_of.push_back(it->second);
            taken[it->second] = 1;
        } else {
            slot_of.push_back(SIZE_MAX);
        }
    }
    free_meta_block_indices_.clear();
    for (size_t i = 0; i < taken.size(); ++i) {
        if (!taken[i]) {
            meta_block_is_allocated_[i] = 0;  // stale data stays, as upstream's
            free_meta_block_indices_.push_back(i);
        }
    }
    for (auto& s : slot_of) {
        if (s != SIZE_MAX) continue;
        if (!free_meta_block_indices_.empty()) {
            s = free_meta_block_indices_.back();
            free_meta_block_indices_.pop_back();
        } else {
            s = block_address_.size();
            block_address_.push_back(0);
            block_size_.push_back(0);
            block_prev_block_.push_back(-1);
            block_next_block_.push_back(-1);
            block_is_allocated_.push_back(0);
            meta_block_is_allocated_.push_back(0);
        }
    }
    size_t k = 0;
    for (const auto& [addr, b] : blocks_) {
        const size_t i = slot_of[k];
        block_address_[i] = addr;
        block_size_[i] = b.size;
        block_prev_block_[i] = k == 0 ? -1 : static_cast<ssize_t>(slot_of[k - 1]);
        block_next_block_[i] = k + 1 == slot_of.size() ? -1 : static_cast<ssize_t>(slot_of[k + 1]);
        block_is_allocated_[i] = b.allocated;
        meta_block_is_allocated_[i] = 1;
        ++k;
    }
    lowest_occupied_address_.reset();
    for (const auto& [addr, b] : blocks_) {
        if (b.allocated) {
            lowest_occupied_address_ = addr;
            break;
        }
    }
}

DeviceAddr FreeListOpt::align(DeviceAddr size) const { return (size + alignment_ - 1) / alignment_ * alignment_; }

DeviceAddr FreeListOpt::alloc_size(DeviceAddr size) const { return align(std::max(size, min_allocation_size_)); }

void FreeListOpt::clear() {
    blocks_.clear();
    if (max_size_bytes_ > 0) blocks_.emplace(0, Block{max_size_bytes_, false});
    mirror();
}

std::optional<DeviceAddr> FreeListOpt::allocate(DeviceAddr size, bool bottom_up) {
    const DeviceAddr span = alloc_size(size);
    std::optional<DeviceAddr> at;
    if (bottom_up) {
        for (const auto& [addr, b] : blocks_) {
            if (!b.allocated && b.size >= span) {
                at = addr;
                break;
            }
        }
    } else {
        for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
            if (!it->second.allocated && it->second.size >= span) {
                at = it->first + it->second.size - span;
                break;
            }
        }
    }
    if (!at) return std::nullopt;
    allocate_at(*at + offset_bytes_, span);
    return *at + offset_bytes_;
}

std::optional<DeviceAddr> FreeListOpt::find_from(DeviceAddr from, DeviceAddr span) const {
    const DeviceAddr rel_from = from > offset_bytes_ ? from - offset_bytes_ : 0;
    for (const auto& [addr, b] : blocks_) {
        if (b.allocated) continue;
        const DeviceAddr start = std::max(addr, align(rel_from));
        if (start < addr + b.size && addr + b.size - start >= span) return start + offset_bytes_;
    }
    return std::nullopt;
}

std::optional<DeviceAddr> FreeListOpt::find_below(DeviceAddr to, DeviceAddr span) const {
    if (to < offset_bytes_) return std::nullopt;
    const DeviceAddr rel_to = to - offset_bytes_;
    for (auto it = blocks_.rbegin(); it != blocks_.rend(); ++it) {
        const auto& [addr, b] = *it;
        if (b.allocated || addr >= rel_to) continue;
        const DeviceAddr end = std::min(addr + b.size, rel_to);
        if (end - addr < span) continue;
        const DeviceAddr start = (end - span) / alignment_ * alignment_;
        if (start >= addr) return start + offset_bytes_;
    }
    return std::nullopt;
}

bool FreeListOpt::allocate_at(DeviceAddr abs_addr, DeviceAddr span) {
    if (abs_addr < offset_bytes_) return false;
    const DeviceAddr addr = abs_addr - offset_bytes_;
    auto it = blocks_.upper_bound(addr);
    if (it == blocks_.begin()) return false;
    --it;
    const DeviceAddr bstart = it->first;
    const Block b = it->second;
    if (b.allocated || addr + span > bstart + b.size) return false;
    blocks_.erase(it);
    if (addr > bstart) blocks_.emplace(bstart, Block{addr - bstart, false});
    blocks_.emplace(addr, Block{span, true});
    if (addr + span < bstart + b.size) blocks_.emplace(addr + span, Block{bstart + b.size - addr - span, false});
    mirror();
    return true;
}

std::vector<std::pair<DeviceAddr, DeviceAddr>> FreeListOpt::allocated_ranges() const {
    std::vector<std::pair<DeviceAddr, DeviceAddr>> out;
    for (const auto& [addr, b] : blocks_) {
        if (b.allocated) out.emplace_back(addr + offset_bytes_, addr + offset_bytes_ + b.size);
    }
    return out;
}

std::vector<std::pair<DeviceAddr, DeviceAddr>> FreeListOpt::free_rooms(
    const std::vector<std::pair<DeviceAddr, DeviceAddr>>& blocked) const {
    // Free space of this list minus the blocked ranges, in address order.
    std::vector<std::pair<DeviceAddr, DeviceAddr>> room;
    for (const auto& [rel, b] : blocks_) {
        if (b.allocated) continue;
        DeviceAddr start = rel + offset_bytes_;
        const DeviceAddr end = start + b.size;
        for (const auto& [bs, be] : blocked) {
            if (be <= start || bs >= end) continue;
            if (bs > start) room.emplace_back(start, bs);
            start = std::max(start, be);
            if (start >= end) break;
        }
        if (start < end) room.emplace_back(start, end);
    }
    return room;
}

std::optional<DeviceAddr> FreeListOpt::allocate_avoiding(DeviceAddr size, bool bottom_up,
                                                         std::vector<std::pair<DeviceAddr, DeviceAddr>> blocked) {
    const DeviceAddr span = alloc_size(size);
    std::sort(blocked.begin(), blocked.end());
    const std::vector<std::pair<DeviceAddr, DeviceAddr>> room = free_rooms(blocked);
    std::optional<DeviceAddr> at;
    if (bottom_up) {
        for (const auto& [s, e] : room) {
            const DeviceAddr a = offset_bytes_ + align(s - offset_bytes_);
            if (a < e && e - a >= span) {
                at = a;
                break;
            }
        }
    } else {
        for (auto it = room.rbegin(); it != room.rend(); ++it) {
            if (it->second - it->first < span) continue;
            const DeviceAddr a = offset_bytes_ + (it->second - span - offset_bytes_) / alignment_ * alignment_;
            if (a >= it->first) {
                at = a;
                break;
            }
        }
    }
    if (!at || !allocate_at(*at, span)) return std::nullopt;
    return at;
}

bool FreeListOpt::deallocate(DeviceAddr abs_addr) {
    if (abs_addr < offset_bytes_) return false;
    auto it = blocks_.find(abs_addr - offset_bytes_);
    if (it == blocks_.end() || !it->second.allocated) return false;
    it->second.allocated = false;
    // Merge with a free next neighbour, then with a free previous one.
    auto next = std::next(it);
    if (next != blocks_.end() && !next->second.allocated) {
        it->second.size += next->second.size;
        blocks_.erase(next);
    }
    if (it != blocks_.begin()) {
        auto prev = std::prev(it);
        if (!prev->second.allocated) {
            prev->second.size += it->second.size;
            blocks_.erase(it);
        }
    }
    mirror();
    return true;
}

Statistics FreeListOpt::get_statistics() const {
    Statistics s;
    s.total_allocatable_size_bytes = max_size_bytes_;
    for (const auto& [addr, b] : blocks_) {
        if (b.allocated) {
            s.total_allocated_bytes += b.size;
        } else {
            s.total_free_bytes += b.size;
            s.largest_free_block_bytes = std::max<uint64_t>(s.largest_free_block_bytes, b.size);
        }
    }
    if (s.total_allocated_bytes == 0) {
        s.total_free_bytes = max_size_bytes_;
        s.largest_free_block_bytes = max_size_bytes_;
    }
    return s;
}

std::optional<DeviceAddr> FreeListOpt::lowest_occupied_address() const {
    for (const auto& [addr, b] : blocks_) {
        if (b.allocated) return addr + offset_bytes_;
    }
    return std::nullopt;
}

}  // namespace allocator

// ---------------------------------------------------------------------------------------------
// BankManager

DeviceAddr calculate_bank_size_spread(DeviceAddr size, DeviceAddr page_size, uint32_t num_banks, uint32_t alignment) {
    if (page_size == 0 || num_banks == 0) return 0;
    const DeviceAddr pages = size / page_size;
    const DeviceAddr per_bank = pages == 0 ? 0 : 1 + (pages - 1) / num_banks;
    const DeviceAddr a = alignment ? alignment : 1;
    return per_bank * ((page_size + a - 1) / a * a);
}

namespace {
// The free list's alignment: the HAL's DRAM alignment for every manager (upstream
// init_allocators). Each chip's managers are built after its config is known.
thread_local uint32_t t_freelist_alignment = 32;
// Set while experimental::per_core_allocation::create_per_core_buffer makes its buffer.
thread_local bool t_per_core = false;

const char* cause_of(const Statistics& s, DeviceAddr span) {
    if (span > s.total_allocatable_size_bytes) return "larger_than_bank";
    if (s.total_free_bytes < span) return "exhausted";
    return "fragmented";
}
}  // namespace

BankManager::BankManager(const BufferType& buffer_type,
                         const std::vector<int64_t>& bank_offsets,
                         DeviceAddr size_bytes,
                         uint32_t alignment_bytes,
                         DeviceAddr alloc_offset,
                         bool /*disable_interleaved*/,
                         const AllocatorDependencies& dependencies)
    : buffer_type_(buffer_type), alignment_bytes_(alignment_bytes), allocator_dependencies_(dependencies) {
    uint32_t bank_id = 0;
    for (const int64_t offset : bank_offsets) bank_id_to_bank_offset_.emplace(bank_id++, offset);
    init_allocators(size_bytes, t_freelist_alignment, alloc_offset);
}

BankManager::BankManager(const BufferType& buffer_type,
                         const std::unordered_map<uint32_t, int64_t>& bank_id_to_bank_offset,
                         DeviceAddr size_bytes,
                         DeviceAddr interleaved_address_limit,
                         uint32_t alignment_bytes,
                         DeviceAddr alloc_offset,
                         bool /*disable_interleaved*/,
                         const AllocatorDependencies& dependencies)
    : buffer_type_(buffer_type),
      bank_id_to_bank_offset_(bank_id_to_bank_offset),
      interleaved_address_limit_(interleaved_address_limit),
      alignment_bytes_(alignment_bytes) , allocator_dependencies_(dependencies) {
    init_allocators(size_bytes, t_freelist_alignment, alloc_offset);
}

void BankManager::init_allocators(DeviceAddr size_bytes, uint32_t alignment_bytes, DeviceAddr offset) {
    const uint32_t n = allocator_dependencies_.num_allocators();
    allocators_.resize(n);
    for (uint32_t i = 0; i < n; ++i) {
        allocators_[i] = std::make_unique<allocator::FreeListOpt>(size_bytes, offset, alignment_bytes, alignment_bytes);
    }
}

DeviceAddr BankManager::span_for(DeviceAddr size, DeviceAddr page_size, std::optional<uint32_t> num_shards) const {
    const uint32_t banks = num_shards ? *num_shards : num_banks();
    return free_list().alloc_size(calculate_bank_size_spread(size, page_size, banks, alignment_bytes_));
}

TT_ALLOCATOR_INLINE DeviceAddr BankManager::allocate_buffer(DeviceAddr size,
                                        DeviceAddr page_size,
                                        bool bottom_up,
                                        const CoreRangeSet& compute_grid,
                                        std::optional<uint32_t> num_shards,
                                        AllocatorDependencies::AllocatorID allocator_id) {
    const uint32_t id = allocator_id.get();
    if (id >= allocators_.size()) {
        throw std::runtime_error("Invalid allocator ID " + std::to_string(id) + " (num_allocators=" +
                                 std::to_string(allocators_.size()) + ")");
    }
    uint32_t banks = num_banks();
    if (num_shards) {
        if (*num_shards > compute_grid.num_cores()) {
            throw std::runtime_error("Expected number of shards " + std::to_string(*num_shards) +
                                     " to be less than or equal to total number of L1 banks " +
                                     std::to_string(compute_grid.num_cores()) + " in compute cores");
        }
        banks = *num_shards;
    }
    const DeviceAddr size_per_bank = calculate_bank_size_spread(size, page_size, banks, alignment_bytes_);
    std::optional<DeviceAddr> address = allocators_.size() == 1 ? mutable_free_list().allocate(size_per_bank, bottom_up)
                                                                 : allocate_dependent(id, size_per_bank, bottom_up);
    if (!address) {
        const Statistics s = mutable_free_list().get_statistics();
        const std::string message =
            "Out of Memory: Not enough space to allocate " + std::to_string(size) + " B " + buffer_type_name(buffer_type_) +
            " buffer across " + std::to_string(banks) + " banks, where each bank needs to store " +
            std::to_string(size_per_bank) + " B, but bank size is " + std::to_string(bank_size()) +
            " B (allocated: " + std::to_string(s.total_allocated_bytes) + " B, free: " +
            std::to_string(s.total_free_bytes) + " B, largest free block: " + std::to_string(s.largest_free_block_bytes) +
            " B)";
        replica::AllocFailure f;
        f.tid = static_cast<int>(syscall(SYS_gettid));
        f.chip = chip_;
        f.mesh = mesh_;
        f.mesh_device = mesh_device_;
        f.type = buffer_type_;
        f.size = size;
        f.page_size = page_size;
        f.banks = banks;
        f.size_per_bank = size_per_bank;
        f.span = mutable_free_list().alloc_size(size_per_bank);
        f.bottom_up = bottom_up;
        f.bank_size = bank_size();
        f.cause = cause_of(s, f.span);
        f.allocator_id = id;
        if (id != 0) {
            // A per-core request: the core's own numbers and cause (its bank through both lists).
            f.core = dependent_statistics(id);
            f.cause = cause_of(f.core, f.span);
        }
        f.message = message;
        f.before = s;
        f.after = mutable_free_list().get_statistics();  // unchanged: nothing was reserved
        f.callers = replica::callers_of_caller();
        replica::note_alloc_failure(f);
        throw std::runtime_error(message);
    }
    return *address;
}

// Out of line, so allocate_buffer's own code keeps its shape in every build.
__attribute__((noinline)) std::optional<DeviceAddr> BankManager::allocate_dependent(uint32_t id, DeviceAddr size_per_bank,
                                                                                    bool bottom_up) {
    // Dependent allocators (HYBRID): lockstep (0) avoids every per-core list's blocks, a
    // per-core list (bank + 1) avoids the lockstep list's.
    return static_cast<allocator::FreeListOpt&>(*allocators_[id]).allocate_avoiding(size_per_bank, bottom_up,
                                                                                     blocked_for(id));
}

std::vector<std::pair<DeviceAddr, DeviceAddr>> BankManager::blocked_for(uint32_t id) const {
    std::vector<std::pair<DeviceAddr, DeviceAddr>> blocked;
    for (uint32_t k = 0; k < allocators_.size(); ++k) {
        if ((id == 0) == (k == 0)) continue;
        const auto r = static_cast<const allocator::FreeListOpt&>(*allocators_[k]).allocated_ranges();
        blocked.insert(blocked.end(), r.begin(), r.end());
    }
    std::sort(blocked.begin(), blocked.end());
    return blocked;
}

Statistics BankManager::dependent_statistics(uint32_t id) const {
    const auto& own = static_cast<const allocator::FreeListOpt&>(*allocators_[id]);
    Statistics s;
    s.total_allocatable_size_bytes = own.max_size();
    for (const auto& [start, end] : own.free_rooms(blocked_for(id))) {
        s.total_free_bytes += end - start;
        s.largest_free_block_bytes = std::max<uint64_t>(s.largest_free_block_bytes, end - start);
    }
    s.total_allocated_bytes = s.total_allocatable_size_bytes - s.total_free_bytes;
    return s;
}

void BankManager::deallocate_buffer(DeviceAddr address, AllocatorDependencies::AllocatorID allocator_id) {
    if (allocator_id.get() < allocators_.size()) {
        static_cast<allocator::FreeListOpt&>(*allocators_[allocator_id.get()]).deallocate(address);
    }
}

// ---------------------------------------------------------------------------------------------
// Chip allocator (upstream AllocatorImpl / L1BankingAllocator)

Allocator::~Allocator() = default;

void make_bank_managers(const AllocatorConfig& config, std::unique_ptr<BankManager> (&banks)[kNumBufferTypes]) {
    t_freelist_alignment = config.shape == ChipShape::Flat ? config.alignment : config.dram_alignment;
    if (config.shape == ChipShape::Flat) {
        for (BufferType t : {BufferType::DRAM, BufferType::TRACE}) {
            const int i = static_cast<int>(t);
            banks[i] = std::make_unique<BankManager>(t, std::vector<int64_t>(1, 0), config.capacity[i], config.alignment,
                                                     config.base[i]);
        }
        for (BufferType t : {BufferType::L1, BufferType::L1_SMALL}) {
            const int i = static_cast<int>(t);
            banks[i] = std::make_unique<BankManager>(t, std::unordered_map<uint32_t, int64_t>{{0u, 0}}, config.capacity[i],
                                                     config.base[i], config.alignment, config.base[i]);
        }
        return;
    }
    // init_one_bank_per_channel: UNRESERVED | DRAM BANK | TRACE REGION
    const DeviceAddr dram_bank_size = config.dram_bank_size - config.dram_unreserved_base - config.trace_region_size;
    std::vector<int64_t> offsets(config.dram_bank_offsets.begin(), config.dram_bank_offsets.end());
    banks[static_cast<int>(BufferType::DRAM)] = std::make_unique<BankManager>(
        BufferType::DRAM, offsets, dram_bank_size, config.dram_alignment, config.dram_unreserved_base);
    banks[static_cast<int>(BufferType::TRACE)] = std::make_unique<BankManager>(
        BufferType::TRACE, offsets, config.trace_region_size, config.dram_alignment, dram_bank_size + config.dram_unreserved_base);
    // init_compute_and_storage_l1_bank_manager
    std::unordered_map<uint32_t, int64_t> l1_banks, small_banks;
    for (uint32_t id = 0; id < config.num_l1_banks; ++id) {
        l1_banks.emplace(id, 0);
        if (config.l1_small_size > 0) small_banks.emplace(id, 0);
    }
    const DeviceAddr l1_bank_size = config.worker_l1_size - config.l1_unreserved_base;
    const DeviceAddr interleaved_limit = config.worker_l1_size - l1_bank_size;
    const DeviceAddr allocatable = l1_bank_size - config.l1_small_size;
    banks[static_cast<int>(BufferType::L1)] = std::make_unique<BankManager>(
        BufferType::L1, l1_banks, allocatable, interleaved_limit, config.l1_alignment, config.l1_unreserved_base, false,
        BankManager::AllocatorDependencies(config.hybrid ? 1 + static_cast<uint32_t>(l1_banks.size()) : 1));
    banks[static_cast<int>(BufferType::L1_SMALL)] = std::make_unique<BankManager>(
        BufferType::L1_SMALL, small_banks, config.l1_small_size, config.worker_l1_size - config.l1_small_size,
        config.l1_alignment, config.l1_unreserved_base + allocatable);
}

ChipAllocator::ChipAllocator(Device* device, const AllocatorConfig& config) : device_(device), config_(config) {
    make_bank_managers(config_, banks_);
    // SYSTEM_MEMORY: no BankManager upstream (it refuses the type); the replica keeps a bare
    // free list, so no BankManager constructor runs for it.
    system_ = allocator::FreeList(config_.capacity[2], config_.base[2], config_.alignment, config_.alignment);
    for (auto& b : banks_) {
        if (b) b->set_chip(device_->id());
    }
}

ChipAllocator::~ChipAllocator() = default;

bool ChipAllocator::default_bottom_up(BufferType type) const {
    return type == BufferType::DRAM || (config_.l1_bottom_up_default && type != BufferType::TRACE);
}

uint32_t ChipAllocator::get_alignment(BufferType type) const { return alignment_of(config_, type); }

uint32_t alignment_of(const AllocatorConfig& config, BufferType type) {
    if (config.shape == ChipShape::Flat) return config.alignment;
    return (type == BufferType::DRAM || type == BufferType::TRACE) ? config.dram_alignment : config.l1_alignment;
}

namespace {
// Buffer::num_pages as the replica has it: a partial last page counts (upstream refuses a size
// that is not a multiple of the page size).
DeviceAddr num_pages(const Buffer* b) {
    if (b->page_size() == 0) return 0;
    return (b->size() + b->page_size() - 1) / b->page_size();
}
}  // namespace

BankRequest bank_request_for(const AllocatorConfig& config, const Buffer* buffer) {
    const uint32_t a = alignment_of(config, buffer->buffer_type());
    const DeviceAddr aligned_page = (buffer->page_size() + a - 1) / a * a;
    DeviceAddr pages = num_pages(buffer);
    const std::optional<uint32_t> shards = buffer->num_cores();
    if (shards && *shards > 0) pages = (pages + *shards - 1) / *shards * *shards;  // shard-padded
    return BankRequest{pages * aligned_page, aligned_page, buffer->bottom_up(), shards};
}

DeviceAddr ChipAllocator::allocate_buffer(Buffer* buffer) {
    if (!device_->is_initialized()) {
        throw std::runtime_error("Device " + std::to_string(device_->id()) + " is closed");
    }
    const BufferType type = buffer->buffer_type();
    const Request r = request_for(buffer);
    if (type == BufferType::SYSTEM_MEMORY) {
        const DeviceAddr span = span_for(type, r);
        std::optional<DeviceAddr> address = system_.allocate(span, r.bottom_up);
        if (!address) {
            throw std::runtime_error("Out of Memory: Not enough space to allocate " + std::to_string(r.size) +
                                     " B SYSTEM_MEMORY buffer");
        }
        reserve(type, *address, span, buffer, buffer->size());
        return *address;
    }
    BankManager& bank = *banks_[static_cast<int>(type)];
    if (t_per_core && config_.hybrid && type == BufferType::L1 && r.num_shards) {
        // Per-core: one call per shard core (bank i, allocator id i + 1), each its own address,
        // its pages spread over that one core (replica choice of arguments).
        const uint32_t cores = *r.num_shards;
        const DeviceAddr pages = r.page_size ? r.size / r.page_size : 0;
        const DeviceAddr per_core = (pages + cores - 1) / cores * r.page_size;
        PerCore pc;
        pc.size = buffer->size();
        pc.span = bank.span_for(per_core, r.page_size, 1u);
        pc.epoch = replica::attach_epoch();
        for (uint32_t core = 0; core < cores; ++core) {
            try {
                pc.cores.emplace_back(core, bank.allocate_buffer(per_core, r.page_size, false, config_.compute_grid, 1u,
                                                                 BankManager::AllocatorDependencies::AllocatorID{core + 1}));
            } catch (...) {
                for (const auto& [c, a] : pc.cores) bank.deallocate_buffer(a, BankManager::AllocatorDependencies::AllocatorID{c + 1});
                throw;
            }
        }
        const DeviceAddr address = pc.cores.front().second;
        for (const auto& [core, a] : pc.cores) replica::l1_per_core(device_->id(), core, static_cast<int64_t>(pc.span));
        replica::l1_settle(device_->id());
        per_core_.emplace(buffer, std::move(pc));
        replica::charge(device_->id(), static_cast<int>(type), static_cast<int64_t>(buffer->size()), false);
        replica::charge(device_->id(), replica::kLive, 1, false);
        return address;
    }
    const DeviceAddr address = bank.allocate_buffer(r.size, r.page_size, r.bottom_up, config_.compute_grid, r.num_shards);
    reserve(type, address, span_for(type, r), buffer, buffer->size());
    return address;
}

allocator::FreeList& ChipAllocator::list(BufferType type) {
    return type == BufferType::SYSTEM_MEMORY ? system_ : banks_[static_cast<int>(type)]->mutable_free_list();
}

DeviceAddr ChipAllocator::span_for(BufferType type, const Request& r) const {
    if (type == BufferType::SYSTEM_MEMORY) return system_.alloc_size(r.size);
    return banks_[static_cast<int>(type)]->span_for(r.size, r.page_size, r.num_shards);
}

void ChipAllocator::deallocate_buffer(Buffer* buffer) {
    auto it = per_core_.find(buffer);
    if (it == per_core_.end()) {
        release(buffer->buffer_type(), buffer->address(), buffer);
        return;
    }
    BankManager& bank = *banks_[static_cast<int>(BufferType::L1)];
    for (const auto& [core, addr] : it->second.cores) {
        bank.deallocate_buffer(addr, BankManager::AllocatorDependencies::AllocatorID{core + 1});
        replica::l1_per_core(device_->id(), core, -static_cast<int64_t>(it->second.span));
    }
    replica::l1_settle(device_->id());
    const bool pre = it->second.epoch < replica::attach_epoch();
    replica::charge(device_->id(), static_cast<int>(BufferType::L1), -static_cast<int64_t>(it->second.size), pre);
    replica::charge(device_->id(), replica::kLive, -1, pre);
    per_core_.erase(it);
}

namespace {
// The worker grid of a shaped chip (its one range), else false.
bool worker_grid(const AllocatorConfig& c, std::size_t* w, std::size_t* h) {
    if (c.compute_grid.ranges().size() != 1 || c.num_l1_banks == 0) return false;
    const CoreRange& g = c.compute_grid.ranges()[0];
    *w = g.end_coord.x - g.start_coord.x + 1;
    *h = g.end_coord.y - g.start_coord.y + 1;
    return *w * *h == c.num_l1_banks;
}
// The smallest stride > 1 coprime with n: bank = (row-major index * stride) mod n.
uint64_t bank_stride(uint64_t n) {
    for (uint64_t s = 7;; s += 2) {
        uint64_t a = s, b = n;
        while (b != 0) {
            const uint64_t t = a % b;
            a = b;
            b = t;
        }
        if (a == 1) return s;
    }
}
}  // namespace

int64_t ChipAllocator::l1_bank_of_core(std::size_t x, std::size_t y) const {
    std::size_t w = 0, h = 0;
    if (!worker_grid(config_, &w, &h) || x >= w || y >= h) return -1;
    const uint64_t n = config_.num_l1_banks;
    return static_cast<int64_t>((static_cast<uint64_t>(y * w + x) * bank_stride(n)) % n);
}

bool ChipAllocator::l1_core_of_bank(uint32_t bank, std::size_t* x, std::size_t* y) const {
    std::size_t w = 0, h = 0;
    if (!worker_grid(config_, &w, &h) || bank >= config_.num_l1_banks) return false;
    for (std::size_t i = 0; i < w * h; ++i) {
        if (l1_bank_of_core(i % w, i / w) == static_cast<int64_t>(bank)) {
            *x = i % w;
            *y = i / w;
            return true;
        }
    }
    return false;
}

DeviceAddr ChipAllocator::per_core_bytes() const {
    DeviceAddr n = 0;
    for (const auto& [b, pc] : per_core_) n += pc.size;
    return n;
}

namespace experimental::per_core_allocation {
std::shared_ptr<Buffer> create_per_core_buffer(IDevice* device, DeviceAddr size, DeviceAddr page_size, uint32_t shard_cores) {
    struct Flag {
        Flag() { t_per_core = true; }
        ~Flag() { t_per_core = false; }
    } flag;
    return Buffer::create(device, size, page_size, BufferType::L1,
                          BufferShardingArgs{TensorMemoryLayout::HEIGHT_SHARDED, shard_cores});
}
}  // namespace experimental::per_core_allocation

void ChipAllocator::reserve(BufferType type, DeviceAddr addr, DeviceAddr span, const Buffer* owner, DeviceAddr size, bool mesh) {
    const uint64_t epoch = replica::attach_epoch();
    const uint64_t serial = replica::trace_note_alloc(device_->id(), type, addr, span, owner, size);
    held_[static_cast<int>(type)].emplace(addr, AllocatorBlock{span, size, owner, epoch, serial, mesh});
    if (type == BufferType::L1 || type == BufferType::L1_SMALL) {
        replica::l1_lock(device_->id(), static_cast<int64_t>(span));
        replica::l1_settle(device_->id());
    }
    replica::charge(device_->id(), static_cast<int>(type), static_cast<int64_t>(size), false);
    replica::charge(device_->id(), replica::kLive, 1, false);
}

bool ChipAllocator::release(BufferType type, DeviceAddr addr, const Buffer* owner) {
    auto& held = held_[static_cast<int>(type)];
    auto [lo, hi] = held.equal_range(addr);
    while (lo != hi && lo->second.owner != owner) ++lo;
    if (lo == hi) return false;
    const AllocatorBlock b = lo->second;
    held.erase(lo);
    if (b.mesh) {
        // The mesh's allocator frees it.
    } else if (type == BufferType::SYSTEM_MEMORY) {
        system_.deallocate(addr);
    } else {
        banks_[static_cast<int>(type)]->deallocate_buffer(addr);
    }
    const bool pre = b.epoch < replica::attach_epoch();
    replica::charge(device_->id(), static_cast<int>(type), -static_cast<int64_t>(b.size), pre);
    replica::charge(device_->id(), replica::kLive, -1, pre);
    if (type == BufferType::L1 || type == BufferType::L1_SMALL) {
        replica::l1_lock(device_->id(), -static_cast<int64_t>(b.aligned_size));
        replica::l1_settle(device_->id());
    }
    return true;
}

void ChipAllocator::clear() {
    for (auto& bank : banks_) {
        if (bank) bank->clear();
    }
    system_.clear();
    for (auto& held : held_) held.clear();
    per_core_.clear();
}

// ---------------------------------------------------------------------------------------------
// Mesh allocator (replica: the same address on every open chip of the mesh)

namespace distributed {

MeshAllocator::MeshAllocator(MeshDevice* mesh, const AllocatorConfig& config) : mesh_(mesh), config_(config) {
    make_bank_managers(config_, banks_);
    system_ = allocator::FreeList(config_.capacity[2], config_.base[2], config_.alignment, config_.alignment);
    for (auto& b : banks_) {
        if (b) b->set_mesh(mesh_->id(), mesh_);
    }
}

MeshAllocator::~MeshAllocator() = default;

bool MeshAllocator::default_bottom_up(BufferType type) const {
    return type == BufferType::DRAM || (config_.l1_bottom_up_default && type != BufferType::TRACE);
}

uint32_t MeshAllocator::get_alignment(BufferType type) const { return alignment_of(config_, type); }

DeviceAddr MeshAllocator::allocate_buffer(Buffer* buffer) {
    if (!mesh_->is_initialized()) throw std::runtime_error("MeshDevice " + std::to_string(mesh_->id()) + " is closed");
    const BufferType type = buffer->buffer_type();
    const BankRequest r = bank_request_for(config_, buffer);
    DeviceAddr address = 0, span = 0;
    if (type == BufferType::SYSTEM_MEMORY) {
        span = system_.alloc_size(r.size);
        std::optional<DeviceAddr> at = system_.allocate(span, r.bottom_up);
        if (!at) {
            throw std::runtime_error("Out of Memory: Not enough space to allocate " + std::to_string(r.size) +
                                     " B SYSTEM_MEMORY buffer");
        }
        address = *at;
    } else {
        BankManager& bank = *banks_[static_cast<int>(type)];
        // Throws "Out of Memory" (recorded in the truth with this mesh) and changes nothing.
        address = bank.allocate_buffer(r.size, r.page_size, r.bottom_up, config_.compute_grid, r.num_shards);
        span = bank.span_for(r.size, r.page_size, r.num_shards);
    }
    held_[static_cast<int>(type)].emplace(address, AllocatorBlock{span, buffer->size(), buffer, replica::attach_epoch(), 0, true});
    replica::trace_group(true);  // one allocation: one serial on every chip
    for (Device* chip : mesh_->get_devices()) {
        if (chip->is_initialized()) chip->chip_allocator()->reserve(type, address, span, buffer, buffer->size(), true);
    }
    replica::trace_group(false);
    return address;
}

void MeshAllocator::deallocate_buffer(Buffer* buffer) {
    const BufferType type = buffer->buffer_type();
    auto& held = held_[static_cast<int>(type)];
    auto it = held.find(buffer->address());
    if (it == held.end() || it->second.owner != buffer) return;
    held.erase(it);
    if (type == BufferType::SYSTEM_MEMORY) {
        system_.deallocate(buffer->address());
    } else {
        banks_[static_cast<int>(type)]->deallocate_buffer(buffer->address());
    }
    for (Device* chip : mesh_->get_devices()) {
        if (chip->is_initialized()) chip->chip_allocator()->release(type, buffer->address(), buffer);
    }
}

void MeshAllocator::clear() {
    for (auto& bank : banks_) {
        if (bank) bank->clear();
    }
    system_.clear();
    for (auto& held : held_) held.clear();
}

}  // namespace distributed
}  // namespace tt::tt_metal
