// Per-chip, per-buffer-type first-fit allocator (lowest free address, 32-byte aligned) and the
// mesh allocator (same address on every chip of a mesh). Not part of what tttrace reads; it is
// where the replica's ground truth comes from.
#pragma once

#include <map>
#include <optional>
#include <vector>

#include "tt_metal/types.hpp"

namespace tt::tt_metal {

class Buffer;
class Device;

struct AllocatorConfig {
    // Same base for every type, so a DRAM and an L1 buffer get the same numeric address.
    DeviceAddr base[kNumBufferTypes] = {0x10000, 0x10000, 0x10000, 0x10000, 0x10000};
    DeviceAddr capacity[kNumBufferTypes] = {
        1ull << 30,  // DRAM 1 GiB
        1ull << 20,  // L1 1 MiB
        1ull << 28,  // SYSTEM_MEMORY 256 MiB
        1ull << 16,  // L1_SMALL 64 KiB
        1ull << 24,  // TRACE 16 MiB
    };
    uint32_t num_banks[kNumBufferTypes] = {12, 64, 1, 64, 12};
    uint32_t alignment = 32;
};

class Allocator {
public:
    virtual ~Allocator();
    // Caller holds replica::mem_mutex(). Throws std::runtime_error on out-of-memory, state unchanged.
    virtual DeviceAddr allocate_buffer(Buffer* buffer) = 0;
    // Caller holds replica::mem_mutex().
    virtual void deallocate_buffer(Buffer* buffer) = 0;
};

// One allocation held by a chip's allocator.
struct AllocatorBlock {
    DeviceAddr aligned_size = 0;  // space reserved
    DeviceAddr size = 0;          // Buffer::size_ (what ground truth counts)
    const Buffer* owner = nullptr;
    uint64_t epoch = 0;  // replica attach epoch at reservation (midrun scenario)
};

class BankManager {
public:
    BankManager() = default;
    BankManager(BufferType type, DeviceAddr base, DeviceAddr capacity, uint32_t num_banks, uint32_t alignment);

    // Lowest aligned address >= from where aligned_size bytes are free.
    std::optional<DeviceAddr> first_fit_from(DeviceAddr from, DeviceAddr aligned_size) const;
    DeviceAddr align(DeviceAddr size) const;
    DeviceAddr base() const { return base_; }
    DeviceAddr capacity() const { return capacity_; }
    uint32_t num_banks() const { return num_banks_; }
    BufferType type() const { return type_; }
    const std::map<DeviceAddr, AllocatorBlock>& blocks() const { return blocks_; }

    void insert(DeviceAddr addr, const AllocatorBlock& block);
    std::optional<AllocatorBlock> erase(DeviceAddr addr);
    void clear() { blocks_.clear(); }

private:
    BufferType type_ = BufferType::DRAM;
    DeviceAddr base_ = 0;
    DeviceAddr capacity_ = 0;
    uint32_t num_banks_ = 1;
    uint32_t alignment_ = 32;
    std::map<DeviceAddr, AllocatorBlock> blocks_;
};

[[noreturn]] void throw_out_of_memory(DeviceAddr size, BufferType type, uint32_t num_banks);

class ChipAllocator final : public Allocator {
public:
    ChipAllocator(Device* device, const AllocatorConfig& config);
    ~ChipAllocator() override;

    DeviceAddr allocate_buffer(Buffer* buffer) override;
    void deallocate_buffer(Buffer* buffer) override;

    const BankManager& bank(BufferType type) const { return banks_[static_cast<int>(type)]; }
    const AllocatorConfig& config() const { return config_; }
    Device* device() const { return device_; }

    // Reserve [addr, addr+aligned) for owner (caller checked it is free) and charge the truth.
    void reserve(BufferType type, DeviceAddr addr, DeviceAddr aligned, const Buffer* owner, DeviceAddr size);
    // Release the allocation at addr, if any, and credit the truth.
    bool release(BufferType type, DeviceAddr addr);
    // Device::close: drop everything at once.
    void clear();

private:
    Device* device_;
    AllocatorConfig config_;
    BankManager banks_[kNumBufferTypes];
};

namespace distributed {
class MeshDevice;

class MeshAllocator final : public Allocator {
public:
    explicit MeshAllocator(MeshDevice* mesh);
    ~MeshAllocator() override;
    // Lowest address free on every (open) chip of the mesh for that type; reserved on each.
    DeviceAddr allocate_buffer(Buffer* buffer) override;
    void deallocate_buffer(Buffer* buffer) override;

private:
    MeshDevice* mesh_;
};
}  // namespace distributed

}  // namespace tt::tt_metal
