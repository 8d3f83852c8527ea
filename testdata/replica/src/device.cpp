// IDevice / Device and the chip registry.
#include "tt_metal/device.hpp"

#include <cstddef>
#include <map>

#include "internal.hpp"
#include "tt_metal/memory_stats_shm.hpp"
#include "tt_metal/metal_context.hpp"

namespace tt::tt_metal {

namespace {
struct Registry {
    std::map<int, Device*> open;
    std::vector<Device*> closed;  // kept alive: buffers may still point at them
};
Registry& registry() {
    static Registry* r = new Registry();
    return *r;
}
std::atomic<bool> g_legacy_cb{false};
}  // namespace

IDevice::~IDevice() = default;

void Device::static_checks() {
    static_assert(offsetof(Device, id_) == 8, "Device::id_ must be at offset 8 (first member after the vptr)");
    static_assert(sizeof(IDevice) == 8, "IDevice holds only a vptr");
}

Device::Device(int device_id, const AllocatorConfig& config)
    : id_(device_id), initialized_(true), build_id_(0x7e57u + static_cast<uint32_t>(device_id)) {
    default_allocator_ = initialize_allocator(config);
    shm_stats_provider_ = replica::make_shm_provider(device_id);
}

// Out of line as upstream's (which returns std::unique_ptr<AllocatorImpl>: rdi is the returned
// pointer's slot, rsi this): the chip's BankManagers are constructed inside, on this thread.
__attribute__((noinline)) std::unique_ptr<ChipAllocator> Device::initialize_allocator(const AllocatorConfig& config) {
    return std::make_unique<ChipAllocator>(this, config);
}

Device::~Device() = default;

ARCH Device::arch() const { return ARCH::WORMHOLE_B0; }
int Device::id() const { return id_; }
uint32_t Device::build_id() const { return build_id_; }
bool Device::is_initialized() const { return initialized_.load(std::memory_order_acquire); }
Allocator* Device::allocator() const { return default_allocator_.get(); }
std::size_t Device::num_devices() const { return 1; }
const AllocatorConfig& Device::allocator_config() const { return default_allocator_->config(); }

TT_PROBED bool Device::close() {
    replica::count_call(replica::kDeviceClose);
    std::lock_guard<std::mutex> lock(replica::mem_mutex());
    replica::touch_chip(id_);
    if (!initialized_.load(std::memory_order_acquire)) return false;
    // Drop the allocator wholesale: every buffer's memory and every CB on the chip is released.
    default_allocator_->clear();
    replica::chip_closed(id_);
    replica::traces_device_closed(this);
    initialized_.store(false, std::memory_order_release);
    replica::device_closed_locked(this);
    return true;
}

Device* CreateDevice(int device_id, const AllocatorConfig& config) {
    std::lock_guard<std::mutex> lock(replica::mem_mutex());
    Registry& r = registry();
    auto it = r.open.find(device_id);
    if (it != r.open.end()) return it->second;
    Device* d = new Device(device_id, config);
    r.open.emplace(device_id, d);
    // Upstream's DeviceManager owns the chips (the root a tracer attaching late starts from).
    MetalContext::instance().device_manager()->add_device(d);
    return d;
}

bool IsDeviceOpen(int device_id) {
    std::lock_guard<std::mutex> lock(replica::mem_mutex());
    return registry().open.count(device_id) != 0;
}

void set_legacy_cb_behaviour(bool legacy) { g_legacy_cb.store(legacy); }
bool legacy_cb_behaviour() { return g_legacy_cb.load(); }

namespace replica {

std::vector<Device*> open_devices_locked() {
    std::vector<Device*> v;
    for (const auto& [id, d] : registry().open) v.push_back(d);
    return v;
}

void device_closed_locked(Device* device) {
    Registry& r = registry();
    auto it = r.open.find(device->id());
    if (it != r.open.end() && it->second == device) {
        r.open.erase(it);
        r.closed.push_back(device);
    }
}

std::vector<const Device*> chips_of(const IDevice* device) {
    if (auto* mesh = dynamic_cast<const distributed::MeshDevice*>(device)) {
        return std::vector<const Device*>(mesh->get_devices().begin(), mesh->get_devices().end());
    }
    if (auto* chip = dynamic_cast<const Device*>(device)) return {chip};
    return {};
}

}  // namespace replica
}  // namespace tt::tt_metal
