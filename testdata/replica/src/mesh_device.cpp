// distributed::MeshDevice. Its own translation unit, so MeshDevice::close() reaches
// Device::close() through a real out-of-line call.
#include <algorithm>
#include <memory>
#include <stdexcept>
#include <string>

#include "internal.hpp"
#include "tt_metal/device.hpp"

namespace tt::tt_metal::distributed {

namespace {

// The mesh's queues (upstream's FDMeshCommandQueue / SDMeshCommandQueue derive from the abstract
// MeshCommandQueue; the replica's queue has nothing of its own to dispatch).
class ReplicaMeshCommandQueue final : public MeshCommandQueue {
public:
    ReplicaMeshCommandQueue(MeshDevice* mesh, uint32_t id) : MeshCommandQueue(mesh, id) {}
};

std::unique_ptr<MeshCommandQueue> make_mesh_command_queue(MeshDevice* mesh, uint32_t id) {
    return std::make_unique<ReplicaMeshCommandQueue>(mesh, id);
}
std::atomic<int> g_next_mesh_id{0};
std::mutex g_meshes_mutex;
std::vector<std::shared_ptr<MeshDevice>>& all_meshes() {
    static auto* v = new std::vector<std::shared_ptr<MeshDevice>>();  // meshes live for the process
    return *v;
}
}  // namespace

std::vector<std::shared_ptr<MeshDevice>> MeshDevice::all() {
    std::lock_guard<std::mutex> lock(g_meshes_mutex);
    return all_meshes();
}

MeshDevice::MeshDevice(Private, int mesh_id, std::vector<Device*> chips, MeshDevice* parent)
    : mesh_id_(mesh_id), initialized_(true), chips_(std::move(chips)), parent_(parent) {}

// Upstream MeshDevice::initialize (mesh_device.cpp) makes the mesh's own L1BankingAllocator from
// its reference chip's allocator config, on the thread creating the mesh: its BankManagers go
// through the same constructors as a chip's, outside any Device::initialize_allocator.
__attribute__((noinline)) void MeshDevice::initialize() {
    allocator_ = std::make_unique<MeshAllocator>(this, chips_.front()->allocator_config());
    for (uint32_t cq = 0; cq < 2; ++cq) mesh_command_queues_.push_back(make_mesh_command_queue(this, cq));
}

MeshDevice::~MeshDevice() = default;

MeshCommandQueue& MeshDevice::mesh_command_queue(uint8_t cq_id) const {
    if (cq_id >= mesh_command_queues_.size()) throw std::out_of_range("no command queue " + std::to_string(cq_id));
    return *mesh_command_queues_[cq_id];
}

std::shared_ptr<MeshDevice> MeshDevice::create(std::vector<Device*> chips) {
    if (chips.empty()) throw std::invalid_argument("MeshDevice needs at least one chip");
    auto mesh = std::make_shared<MeshDevice>(Private{}, g_next_mesh_id.fetch_add(1), std::move(chips), nullptr);
    mesh->initialize();
    std::lock_guard<std::mutex> lock(g_meshes_mutex);
    all_meshes().push_back(mesh);
    return mesh;
}

std::shared_ptr<MeshDevice> MeshDevice::create_submesh(const std::vector<Device*>& chips) {
    for (Device* c : chips) {
        if (std::find(chips_.begin(), chips_.end(), c) == chips_.end()) {
            throw std::invalid_argument("sub-mesh chip is not part of the parent mesh");
        }
    }
    if (chips.empty()) throw std::invalid_argument("sub-mesh needs at least one chip");
    auto sub = std::make_shared<MeshDevice>(Private{}, g_next_mesh_id.fetch_add(1), chips, this);
    sub->initialize();
    std::lock_guard<std::mutex> lock(g_meshes_mutex);
    submeshes_.push_back(sub);
    all_meshes().push_back(sub);
    return sub;
}

ARCH MeshDevice::arch() const { return chips_.front()->arch(); }
int MeshDevice::id() const { return mesh_id_; }
uint32_t MeshDevice::build_id() const { return chips_.front()->build_id(); }
bool MeshDevice::is_initialized() const { return initialized_.load(std::memory_order_acquire); }
Allocator* MeshDevice::allocator() const { return allocator_.get(); }
std::size_t MeshDevice::num_devices() const { return chips_.size(); }

TT_PROBED bool MeshDevice::close() {
    replica::count_call(replica::kMeshClose);
    if (!initialized_.load(std::memory_order_acquire)) return false;
    std::vector<std::shared_ptr<MeshDevice>> subs;
    {
        std::lock_guard<std::mutex> lock(g_meshes_mutex);
        subs = submeshes_;
    }
    for (auto& sub : subs) sub->close();
    for (Device* chip : chips_) chip->close();
    {
        // Upstream resets the sub-device manager tracker, which owns the mesh's allocator.
        std::lock_guard<std::mutex> lock(replica::mem_mutex());
        allocator_->clear();
        initialized_.store(false, std::memory_order_release);
    }
    return true;
}

}  // namespace tt::tt_metal::distributed
