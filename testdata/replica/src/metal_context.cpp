// MetalContext / DeviceManager: the root of the open chips (include/tt_metal/metal_context.hpp).
#include "tt_metal/metal_context.hpp"

#include "internal.hpp"
#include "tt_metal/device.hpp"
#include "tt_metal/metal_env.hpp"

namespace tt::tt_metal {

std::array<std::atomic<MetalContext*>, MAX_CONTEXT_COUNT> g_instances{};

DeviceManager::DeviceManager() = default;
DeviceManager::~DeviceManager() = default;

void DeviceManager::add_device(Device* device) {
    is_initialized_ = true;
    devices_.emplace_back(device);
}

MetalEnvImpl::MetalEnvImpl()
    : rtoptions_(std::make_unique<int>(0)),
      cluster_(std::make_unique<Cluster>(replica::cluster_descriptor())),
      hal_(std::make_unique<int>(0)) {}
MetalEnvImpl::~MetalEnvImpl() = default;

MetalEnv::MetalEnv() : impl_(std::make_unique<MetalEnvImpl>()) {}
MetalEnv::~MetalEnv() = default;

MetalContext::MetalContext()
    : env_(new MetalEnv()), env_owned_(true), device_manager_(std::make_unique<DeviceManager>()) {}

// Callers hold replica::mem_mutex() (CreateDevice), as upstream's hold g_instance_mutex.
MetalContext& MetalContext::instance() {
    MetalContext* instance = g_instances[0].load(std::memory_order_acquire);
    if (instance == nullptr) {
        instance = new MetalContext();
        instance->initialized_ = true;
        g_instances[0].store(instance, std::memory_order_release);
    }
    return *instance;
}

}  // namespace tt::tt_metal
