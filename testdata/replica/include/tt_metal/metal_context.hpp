// The process-wide root of the open chips, in upstream's 2026 shape (docs/ttmetal.md §9,
// "Finding the allocators at attach"): tt_metal/impl/context/metal_context.{hpp,cpp} keep every
// MetalContext in the namespace-scope array `g_instances` (slot 0 the silicon context); a
// MetalContext owns its DeviceManager (`device_manager_`), whose `devices_` own the chips'
// Device objects (tt_metal/impl/device/device_manager.hpp). A tracer that attaches after the
// chips opened finds their allocators from here, and UMD's cluster descriptor through the
// context's MetalEnv (env_, metal_env.hpp). The replica keeps only these members.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

namespace tt::tt_metal {

class Device;
class MetalEnv;

// Upstream context_types.hpp.
constexpr std::size_t MAX_CONTEXT_COUNT = 32;

class DeviceManager {
public:
    DeviceManager();
    ~DeviceManager();
    // Takes ownership of a newly opened chip (the replica never destroys a Device: a closed
    // chip stays here, not initialized, and a reopened one is a new Device).
    void add_device(Device* device);

private:
    bool is_initialized_ = false;
    std::vector<std::unique_ptr<Device>> devices_;
};

class MetalContext {
public:
    // The silicon context (slot 0), made on first use; never destroyed (upstream destroys it
    // at exit).
    static MetalContext& instance();
    std::unique_ptr<DeviceManager>& device_manager() { return device_manager_; }

private:
    MetalContext();
    bool initialized_ = false;
    // Upstream: the MetalEnv the context uses; the default (silicon) context makes its own and
    // owns it.
    MetalEnv* env_ = nullptr;
    bool env_owned_ = false;
    std::unique_ptr<DeviceManager> device_manager_;
};

// Upstream metal_context.cpp: `std::array<std::atomic<MetalContext*>, MAX_CONTEXT_COUNT>
// g_instances{};` (external linkage, so in .dynsym).
extern std::array<std::atomic<MetalContext*>, MAX_CONTEXT_COUNT> g_instances;

}  // namespace tt::tt_metal
