// First-fit allocators. Every reserve/release charges the ground truth (memory really changes here).
#include "tt_metal/allocator.hpp"

#include <stdexcept>
#include <string>

#include "internal.hpp"
#include "tt_metal/buffer.hpp"
#include "tt_metal/device.hpp"

namespace tt::tt_metal {

Allocator::~Allocator() = default;

[[noreturn]] void throw_out_of_memory(DeviceAddr size, BufferType type, uint32_t num_banks) {
    uint64_t per_bank = num_banks ? (size + num_banks - 1) / num_banks : size;
    throw std::runtime_error("Out of Memory: Not enough space to allocate " + std::to_string(size) + " B " +
                             buffer_type_name(type) + " buffer across " + std::to_string(num_banks) +
                             " banks, where each bank needs to store " + std::to_string(per_bank) + " B");
}

BankManager::BankManager(BufferType type, DeviceAddr base, DeviceAddr capacity, uint32_t num_banks, uint32_t alignment)
    : type_(type), base_(base), capacity_(capacity), num_banks_(num_banks), alignment_(alignment ? alignment : 1) {}

DeviceAddr BankManager::align(DeviceAddr size) const {
    if (size == 0) size = 1;
    return (size + alignment_ - 1) / alignment_ * alignment_;
}

std::optional<DeviceAddr> BankManager::first_fit_from(DeviceAddr from, DeviceAddr aligned_size) const {
    DeviceAddr cand = from < base_ ? base_ : from;
    cand = base_ + (cand - base_ + alignment_ - 1) / alignment_ * alignment_;
    auto it = blocks_.upper_bound(cand);
    if (it != blocks_.begin()) {
        auto prev = std::prev(it);
        DeviceAddr end = prev->first + prev->second.aligned_size;
        if (end > cand) cand = end;
    }
    const DeviceAddr limit = base_ + capacity_;
    while (it != blocks_.end() && it->first < cand + aligned_size) {
        DeviceAddr end = it->first + it->second.aligned_size;
        if (end > cand) cand = end;
        ++it;
    }
    if (aligned_size > capacity_ || cand > limit - aligned_size) return std::nullopt;
    return cand;
}

void BankManager::insert(DeviceAddr addr, const AllocatorBlock& block) { blocks_.emplace(addr, block); }

std::optional<AllocatorBlock> BankManager::erase(DeviceAddr addr) {
    auto it = blocks_.find(addr);
    if (it == blocks_.end()) return std::nullopt;
    AllocatorBlock b = it->second;
    blocks_.erase(it);
    return b;
}

ChipAllocator::ChipAllocator(Device* device, const AllocatorConfig& config) : device_(device), config_(config) {
    for (int t = 0; t < kNumBufferTypes; ++t) {
        banks_[t] = BankManager(static_cast<BufferType>(t), config.base[t], config.capacity[t], config.num_banks[t],
                                config.alignment);
    }
}

ChipAllocator::~ChipAllocator() = default;

DeviceAddr ChipAllocator::allocate_buffer(Buffer* buffer) {
    if (!device_->is_initialized()) {
        throw std::runtime_error("Device " + std::to_string(device_->id()) + " is closed");
    }
    const BufferType type = buffer->buffer_type();
    BankManager& bank = banks_[static_cast<int>(type)];
    const DeviceAddr aligned = bank.align(buffer->size());
    std::optional<DeviceAddr> addr = bank.first_fit_from(bank.base(), aligned);
    if (!addr) throw_out_of_memory(buffer->size(), type, bank.num_banks());
    reserve(type, *addr, aligned, buffer, buffer->size());
    return *addr;
}

void ChipAllocator::deallocate_buffer(Buffer* buffer) { release(buffer->buffer_type(), buffer->address()); }

void ChipAllocator::reserve(BufferType type, DeviceAddr addr, DeviceAddr aligned, const Buffer* owner, DeviceAddr size) {
    const uint64_t epoch = replica::attach_epoch();
    banks_[static_cast<int>(type)].insert(addr, AllocatorBlock{aligned, size, owner, epoch});
    replica::charge(device_->id(), static_cast<int>(type), static_cast<int64_t>(size), false);
    replica::charge(device_->id(), replica::kLive, 1, false);
}

bool ChipAllocator::release(BufferType type, DeviceAddr addr) {
    std::optional<AllocatorBlock> b = banks_[static_cast<int>(type)].erase(addr);
    if (!b) return false;
    const bool pre = b->epoch < replica::attach_epoch();
    replica::charge(device_->id(), static_cast<int>(type), -static_cast<int64_t>(b->size), pre);
    replica::charge(device_->id(), replica::kLive, -1, pre);
    return true;
}

void ChipAllocator::clear() {
    for (auto& bank : banks_) bank.clear();
}

namespace distributed {

MeshAllocator::MeshAllocator(MeshDevice* mesh) : mesh_(mesh) {}
MeshAllocator::~MeshAllocator() = default;

DeviceAddr MeshAllocator::allocate_buffer(Buffer* buffer) {
    if (!mesh_->is_initialized()) throw std::runtime_error("MeshDevice " + std::to_string(mesh_->id()) + " is closed");
    const BufferType type = buffer->buffer_type();
    std::vector<ChipAllocator*> allocs;
    for (Device* chip : mesh_->get_devices()) {
        if (chip->is_initialized()) allocs.push_back(chip->chip_allocator());
    }
    if (allocs.empty()) throw std::runtime_error("MeshDevice has no open chip");
    const BankManager& first = allocs.front()->bank(type);
    const DeviceAddr aligned = first.align(buffer->size());
    DeviceAddr cand = 0;
    for (ChipAllocator* a : allocs) cand = std::max(cand, a->bank(type).base());
    // Lowest address free on every chip: move the candidate up until all chips agree.
    for (;;) {
        bool moved = false;
        for (ChipAllocator* a : allocs) {
            std::optional<DeviceAddr> r = a->bank(type).first_fit_from(cand, aligned);
            if (!r) throw_out_of_memory(buffer->size(), type, first.num_banks());
            if (*r != cand) {
                cand = *r;
                moved = true;
                break;
            }
        }
        if (!moved) break;
    }
    for (ChipAllocator* a : allocs) a->reserve(type, cand, aligned, buffer, buffer->size());
    return cand;
}

void MeshAllocator::deallocate_buffer(Buffer* buffer) {
    for (Device* chip : mesh_->get_devices()) {
        if (chip->is_initialized()) chip->chip_allocator()->release(buffer->buffer_type(), buffer->address());
    }
}

}  // namespace distributed
}  // namespace tt::tt_metal
