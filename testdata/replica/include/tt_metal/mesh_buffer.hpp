// distributed::MeshBuffer: one owning backing Buffer on the MeshDevice + one view per chip.
#pragma once

#include <memory>
#include <vector>

#include "tt_metal/buffer.hpp"
#include "tt_metal/device.hpp"

namespace tt::tt_metal::distributed {

class MeshBuffer {
    struct Private {
        explicit Private() = default;
    };

public:
    // Backing buffer on the mesh (one track_allocate, same address on every chip), then one
    // pre-allocated view per chip via Buffer::create(chip, address, ...) on this thread.
    static std::shared_ptr<MeshBuffer> create(MeshDevice* mesh, DeviceAddr size, DeviceAddr page_size, BufferType type);
    MeshBuffer(Private, MeshDevice* mesh);
    ~MeshBuffer();

    MeshBuffer(const MeshBuffer&) = delete;
    MeshBuffer& operator=(const MeshBuffer&) = delete;

    // Frees the backing buffer (one track_deallocate); if the mesh is closed, only
    // mark_as_deallocated() on the backing buffer and the views.
    void deallocate();

    DeviceAddr address() const;
    DeviceAddr size() const;
    MeshDevice* device() const { return mesh_; }
    const std::shared_ptr<Buffer>& get_backing_buffer() const { return backing_; }
    const std::vector<std::shared_ptr<Buffer>>& get_device_buffers() const { return views_; }

private:
    MeshDevice* mesh_;
    std::shared_ptr<Buffer> backing_;
    std::vector<std::shared_ptr<Buffer>> views_;
    bool deallocated_ = false;
};

}  // namespace tt::tt_metal::distributed
