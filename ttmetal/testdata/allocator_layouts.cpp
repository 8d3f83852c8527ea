// A library with what ttmetal.AllocatorLayoutsFromDWARF reads, in the
// shapes of upstream's 2026 sources (docs/ttmetal.md §9): the bank manager
// with its free list, and the root of the open chips. The compiler's own
// offsets are exported as off_* for the tests to compare with.
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>
namespace ttsl {
template <typename T, std::size_t N>
class SmallVector {
public:
    T* begin_ = nullptr;
    std::uint32_t size_ = 0, capacity_ = N;
    T inline_[N];
};
}  // namespace ttsl
namespace tt::tt_metal {
namespace allocator {
class Algorithm {
public:
    virtual ~Algorithm();
    std::uint64_t max_size_bytes_ = 0;
    std::uint64_t offset_bytes_ = 0;
    std::uint64_t min_allocation_size_ = 0;
    std::uint64_t alignment_ = 0;
    std::uint64_t shrink_size_ = 0;
};
Algorithm::~Algorithm() = default;
class FreeListOpt : public Algorithm {
public:
    ~FreeListOpt() override;
    std::vector<std::uint64_t> block_address_;
    std::vector<std::uint64_t> block_size_;
    std::vector<std::int32_t> block_prev_block_;
    std::vector<std::int32_t> block_next_block_;
    std::vector<std::uint8_t> block_is_allocated_;
    std::vector<std::uint8_t> meta_block_is_allocated_;
};
FreeListOpt::~FreeListOpt() = default;
}  // namespace allocator
class BankManager {
public:
    int buffer_type_ = 0;
    std::unordered_map<std::uint32_t, std::int64_t> bank_id_to_bank_offset_;
    std::uint64_t interleaved_address_limit_ = 0;
    std::uint32_t alignment_bytes_ = 0;
    ttsl::SmallVector<std::unique_ptr<allocator::Algorithm>, 1> allocators_;
};
class AllocatorImpl {
public:
    virtual ~AllocatorImpl();
    mutable std::mutex mutex_;
    std::unique_ptr<BankManager> dram_manager_;
    std::unique_ptr<BankManager> l1_manager_;
    std::unique_ptr<BankManager> l1_small_manager_;
    std::unique_ptr<BankManager> trace_buffer_manager_;
};
AllocatorImpl::~AllocatorImpl() = default;
class Device {
public:
    virtual ~Device();
    int id_ = 0;
    bool initialized_ = false;
    std::unique_ptr<AllocatorImpl> default_allocator_;
};
Device::~Device() = default;
class DeviceManager {
public:
    std::vector<std::unique_ptr<Device>> devices_;
};
class MetalContext {
public:
    bool initialized_ = false;
    std::unique_ptr<DeviceManager> device_manager_;
};
std::array<std::atomic<MetalContext*>, 32> g_instances{};
BankManager bm;
allocator::FreeListOpt fl;
Device dev;
DeviceManager dm;
MetalContext mc;
}  // namespace tt::tt_metal
using namespace tt::tt_metal;
using namespace tt::tt_metal::allocator;
extern "C" {
extern const long off_buffer_type = offsetof(BankManager, buffer_type_);
extern const long off_bank_map = offsetof(BankManager, bank_id_to_bank_offset_);
extern const long off_address_limit = offsetof(BankManager, interleaved_address_limit_);
extern const long off_alignment = offsetof(BankManager, alignment_bytes_);
extern const long off_allocators = offsetof(BankManager, allocators_);
extern const long off_max_size = offsetof(FreeListOpt, max_size_bytes_);
extern const long off_offset = offsetof(FreeListOpt, offset_bytes_);
extern const long off_block_address = offsetof(FreeListOpt, block_address_);
extern const long off_meta_allocated = offsetof(FreeListOpt, meta_block_is_allocated_);
extern const long off_dm = offsetof(MetalContext, device_manager_);
extern const long off_devices = offsetof(DeviceManager, devices_);
extern const long off_id = offsetof(Device, id_);
extern const long off_alloc = offsetof(Device, default_allocator_);
extern const long off_l1 = offsetof(AllocatorImpl, l1_manager_);
}
