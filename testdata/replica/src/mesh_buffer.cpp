// distributed::MeshBuffer (docs/ttmetal.md §4).
#include "tt_metal/mesh_buffer.hpp"

namespace tt::tt_metal::distributed {

MeshBuffer::MeshBuffer(Private, MeshDevice* mesh) : mesh_(mesh) {}

std::shared_ptr<MeshBuffer> MeshBuffer::create(MeshDevice* mesh, DeviceAddr size, DeviceAddr page_size, BufferType type) {
    auto mb = std::make_shared<MeshBuffer>(Private{}, mesh);
    // One owning backing buffer whose device_ is the MeshDevice: one track_allocate, the mesh
    // allocator reserves the same address on every chip. Throws on out-of-memory.
    mb->backing_ = Buffer::create(mesh, size, page_size, type);
    const DeviceAddr address = mb->backing_->address();
    // Then, on this thread, one pre-allocated view per chip (no events).
    for (Device* chip : mesh->get_devices()) {
        mb->views_.push_back(Buffer::create(chip, address, size, page_size, type));
    }
    return mb;
}

MeshBuffer::~MeshBuffer() { deallocate(); }

void MeshBuffer::deallocate() {
    if (deallocated_ || !backing_) return;
    deallocated_ = true;
    if (mesh_->is_initialized()) {
        views_.clear();          // views own nothing: no event
        backing_->deallocate();  // one track_deallocate, freed on every chip
    } else {
        backing_->mark_as_deallocated();
        for (auto& v : views_) v->mark_as_deallocated();
    }
}

DeviceAddr MeshBuffer::address() const { return backing_ ? backing_->address() : 0; }
DeviceAddr MeshBuffer::size() const { return backing_ ? backing_->size() : 0; }

}  // namespace tt::tt_metal::distributed
