// _ttnncpp.so: the TT-NN stand-in's ops (ttnn.hpp says which names each era has).
//
// Every op function enters an op frame of the replica's truth first thing and leaves it when it
// returns or throws (OpFrame, RAII), so a call is never a tail call and never inlined away
// (TTNN_OUT_OF_LINE). A device op launch makes its outputs through the replica's Buffer API,
// looks its program up in the device's program cache (a miss validates, which may throw, and
// builds a Program with CBs), gives the program the launch's runtime id
// (Program::set_runtime_id, every launch) and enqueues it (experimental::enqueue_program: CB
// layout on a miss, dispatch always).
#include "ttnn.hpp"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace tt::tt_metal {

Tensor::Tensor(std::shared_ptr<Buffer> buffer, IDevice* device, uint64_t bytes, BufferType type)
    : buffer_(std::move(buffer)), device_(device), bytes_(bytes), type_(type) {}

Tensor::Tensor(std::shared_ptr<distributed::MeshBuffer> buffer, IDevice* device, uint64_t bytes, BufferType type)
    : mesh_buffer_(std::move(buffer)), device_(device), bytes_(bytes), type_(type) {}

void Tensor::deallocate() {
    if (mesh_buffer_) mesh_buffer_->deallocate();
    if (buffer_) buffer_->deallocate();
    mesh_buffer_.reset();
    buffer_.reset();
}

Tensor allocate_tensor_on_device(IDevice* device, uint64_t bytes, BufferType type) {
    const uint64_t page = bytes < 2048 ? bytes : 2048;
    if (auto* mesh = dynamic_cast<distributed::MeshDevice*>(device)) {
        return Tensor(distributed::MeshBuffer::create(mesh, bytes, page, type), device, bytes, type);
    }
    return Tensor(Buffer::create(device, bytes, page, type), device, bytes, type);
}

}  // namespace tt::tt_metal

namespace ttnn {

using tt::tt_metal::BufferType;
using tt::tt_metal::IDevice;
using tt::tt_metal::Program;

namespace {

// The op frame of a function, for the replica's truth (tt_replica_op_enter/leave).
struct OpFrame {
    OpFrame(const char* name, int kind) { tt_replica_op_enter(name, kind); }
    ~OpFrame() { tt_replica_op_leave(); }
    OpFrame(const OpFrame&) = delete;
    OpFrame& operator=(const OpFrame&) = delete;
};

// A device's program cache, launch lock and (optionally) dispatch thread.
struct DeviceCtx {
    IDevice* device = nullptr;
    std::shared_ptr<tt::tt_metal::distributed::MeshDevice> mesh;
    int chip = -1;
    // One launch at a time per device (upstream: one dispatching thread per device), held from the
    // cache lookup through the enqueue: set_runtime_id and the program's layout stay together.
    std::mutex launch;
    std::map<std::pair<const void*, uint64_t>, std::unique_ptr<Program>> cache;  // (op, hash)
    // Dispatch thread: the launching thread hands it the program and waits.
    bool has_thread = false;
    std::thread worker;
    std::mutex mu;
    std::condition_variable cv;
    Program* pending = nullptr;
    bool done = false, stop = false;
    std::exception_ptr error;
    // ttnn.traced_add's trace on this device, once captured, and its output.
    bool traced = false;
    uint32_t traced_id = 0;
    Tensor traced_out;

    void enqueue(Program& program) {
        if (!has_thread) {
            tt::tt_metal::experimental::enqueue_program(device, program.impl());
            return;
        }
        std::unique_lock<std::mutex> lock(mu);
        pending = &program;
        done = false;
        error = nullptr;
        cv.notify_all();
        cv.wait(lock, [&] { return done; });
        if (error) std::rethrow_exception(error);
    }

    void run() {
        std::unique_lock<std::mutex> lock(mu);
        for (;;) {
            cv.wait(lock, [&] { return stop || pending != nullptr; });
            if (stop) return;
            Program* p = pending;
            pending = nullptr;
            try {
                tt::tt_metal::experimental::enqueue_program(device, p->impl());
            } catch (...) {
                error = std::current_exception();
            }
            done = true;
            cv.notify_all();
        }
    }
};

std::mutex g_devices_mutex;
std::map<IDevice*, std::unique_ptr<DeviceCtx>>& devices() {
    static auto* d = new std::map<IDevice*, std::unique_ptr<DeviceCtx>>();
    return *d;
}

DeviceCtx& ctx_of(IDevice* device) {
    std::lock_guard<std::mutex> lock(g_devices_mutex);
    auto it = devices().find(device);
    if (it == devices().end()) throw std::runtime_error("TT_FATAL: tensor on a device ttnn did not open");
    return *it->second;
}

// Something an op does that the optimizer cannot drop: a call ends in an observable store.
std::atomic<uint64_t> g_launches{0};

std::vector<Tensor> make_outputs(const StandInAttributes& a, IDevice* device) {
    std::vector<Tensor> out;
    for (uint32_t i = 0; i < a.parts; ++i) {
        out.push_back(tt::tt_metal::allocate_tensor_on_device(device, a.out_bytes, a.out_type));  // may throw (OOM)
    }
    return out;
}

IDevice* device_of(const std::vector<Tensor>& inputs) {
    if (inputs.empty() || inputs.front().device() == nullptr) throw std::runtime_error("TT_FATAL: no device tensor");
    return inputs.front().device();
}

uint64_t hash_of(const StandInAttributes& a, const std::vector<Tensor>& inputs) {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(a.out_bytes);
    mix(a.parts);
    mix(static_cast<uint64_t>(a.out_type));
    for (uint32_t c : a.cb_bytes) mix(c);
    mix(a.cb_grid);
    mix(a.shard_cores);
    for (const Tensor& t : inputs) mix(t.bytes());
    return h;
}

void validate(const StandInAttributes& a) {
    if (a.check_cores && (a.shard_cores == 0 || a.shard_cores > 64)) {
        throw std::runtime_error("TT_FATAL: reshard: shard grid of " + std::to_string(a.shard_cores) +
                                 " cores is not between 1 and 64");
    }
}

void add_cbs(Program& program, const StandInAttributes& a) {
    using namespace tt::tt_metal;  // CoreRangeSet: global, or in tt::tt_metal (CORE_NS=1)
    const std::size_t g = a.cb_grid ? a.cb_grid - 1 : 0;
    for (uint32_t size : a.cb_bytes) {
        if (size != 0) {
            program.impl().add_circular_buffer(CoreRangeSet(CoreRange({0, 0}, {g, g})), size);
        }
    }
}

enum class IdWhen { AtSet, Given };

// The program part of every era's launch (not an op function): cache lookup, validation and
// program on a miss, set_runtime_id, enqueue. id: the launch's id when it was taken earlier
// (g1's launch_on_worker_thread takes it first), else one is taken here.
template <typename Op>
void run_program(const typename Op::operation_attributes_t& attrs, const typename Op::tensor_args_t& args,
                 typename Op::tensor_return_value_t& outputs, IDevice* device, IdWhen when, int64_t id) {
    (void)outputs;
    DeviceCtx& ctx = ctx_of(device);
    std::lock_guard<std::mutex> launch(ctx.launch);
    const auto key = std::make_pair(static_cast<const void*>(Op::kName), Op::compute_program_hash(attrs, args));
    auto it = ctx.cache.find(key);
    if (it == ctx.cache.end()) {
        Op::validate_on_program_cache_miss(attrs, args);
        auto program = std::make_unique<Program>();
        Op::create_program(*program, attrs, args, outputs);
        it = ctx.cache.emplace(key, std::move(program)).first;
    }
    if (when == IdWhen::AtSet) id = CoreIDs::instance().fetch_and_increment_device_operation_id();
    it->second->set_runtime_id(static_cast<tt::tt_metal::ProgramId>(id));
    ctx.enqueue(*it->second);
    g_launches.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

CoreIDs& CoreIDs::instance() {
    static CoreIDs* ids = new CoreIDs();
    return *ids;
}

int64_t CoreIDs::fetch_and_increment_device_operation_id() { return device_operation_id_.fetch_add(1); }

// ------------------------------------------------------------------ the device ops' functions

#define TTNN_DEFINE_DEVICE_OPERATION(OP)                                                                       \
    void OP::validate_on_program_cache_miss(const operation_attributes_t& a, const tensor_args_t&) {           \
        validate(a);                                                                                         \
    }                                                                                                        \
    OP::tensor_return_value_t OP::create_output_tensors(const operation_attributes_t& a,                     \
                                                        const tensor_args_t& t) {                            \
        return make_outputs(a, device_of(t.input_tensors));                                                  \
    }                                                                                                        \
    uint64_t OP::compute_program_hash(const operation_attributes_t& a, const tensor_args_t& t) {             \
        return hash_of(a, t.input_tensors);                                                                  \
    }                                                                                                        \
    void OP::create_program(Program& program, const operation_attributes_t& a, const tensor_args_t&,          \
                            tensor_return_value_t&) {                                                        \
        add_cbs(program, a);                                                                                 \
    }

#if TT_REPLICA_TTNN_ERA == TTNN_ERA_2026

namespace prim {
TTNN_DEFINE_DEVICE_OPERATION(MatmulDeviceOperation)
TTNN_DEFINE_DEVICE_OPERATION(BinaryNgDeviceOperation)
TTNN_DEFINE_DEVICE_OPERATION(Conv2dDeviceOperation)
TTNN_DEFINE_DEVICE_OPERATION(ReshardDeviceOperation)
TTNN_DEFINE_DEVICE_OPERATION(SplitDeviceOperation)
}  // namespace prim

namespace device_operation::detail {

// Upstream (ttnn/api/ttnn/device_operation.hpp): outputs first, then the mesh adapter.
template <typename device_operation_t>
TTNN_OUT_OF_LINE typename device_operation_t::tensor_return_value_t launch(
    const typename device_operation_t::operation_attributes_t& operation_attributes,
    const typename device_operation_t::tensor_args_t& tensor_args) {
    OpFrame frame(device_operation_t::kName, TT_REPLICA_OP_DEVICE);
    auto tensor_return_value = device_operation_t::create_output_tensors(operation_attributes, tensor_args);
    auto* mesh_device = dynamic_cast<ttnn::MeshDevice*>(device_of(tensor_args.input_tensors));
    if (mesh_device == nullptr) throw std::runtime_error("TT_FATAL: 2026 ops run on a MeshDevice");
    launch_operation_with_adapter<MeshDeviceOperationAdapter<device_operation_t>>(
        operation_attributes, tensor_args, tensor_return_value, mesh_device);
    return tensor_return_value;
}

// Cache hit or miss, then enqueue_mesh_workload: set_runtime_id (one id per launch), enqueue.
template <typename mesh_device_operation_t>
TTNN_OUT_OF_LINE void launch_operation_with_adapter(
    const typename mesh_device_operation_t::operation_attributes_t& operation_attributes,
    const typename mesh_device_operation_t::tensor_args_t& tensor_args,
    typename mesh_device_operation_t::tensor_return_value_t& tensor_return_value, ttnn::MeshDevice* mesh_device) {
    using Op = typename mesh_device_operation_t::device_operation_t;
    OpFrame frame(Op::kName, TT_REPLICA_OP_DEVICE);
    run_program<Op>(operation_attributes, tensor_args, tensor_return_value, mesh_device, IdWhen::AtSet, 0);
}

}  // namespace device_operation::detail

namespace device_operation::detail {
#define TTNN_INSTANTIATE(OP)                                                                              \
    template OP::tensor_return_value_t launch<OP>(const OP::operation_attributes_t&, const OP::tensor_args_t&); \
    template void launch_operation_with_adapter<MeshDeviceOperationAdapter<OP>>(                          \
        const OP::operation_attributes_t&, const OP::tensor_args_t&, OP::tensor_return_value_t&, ttnn::MeshDevice*);
TTNN_INSTANTIATE(prim::MatmulDeviceOperation)
TTNN_INSTANTIATE(prim::BinaryNgDeviceOperation)
TTNN_INSTANTIATE(prim::Conv2dDeviceOperation)
TTNN_INSTANTIATE(prim::ReshardDeviceOperation)
TTNN_INSTANTIATE(prim::SplitDeviceOperation)
}  // namespace device_operation::detail

namespace prim {
// Pass-through: build the attributes, launch. No op frame (upstream's prims only pass through).
#define TTNN_PRIM2(FN, OP, P)                                                                      \
    TTNN_OUT_OF_LINE std::vector<Tensor> FN(const Tensor& a, const Tensor& b, const P& attributes) { \
        auto out = ttnn::device_operation::detail::launch<OP>(attributes, P##Inputs_of(a, b));       \
        g_launches.fetch_add(0, std::memory_order_relaxed);                                        \
        return out;                                                                                \
    }
#define TTNN_PRIM1(FN, OP, P)                                                                      \
    TTNN_OUT_OF_LINE std::vector<Tensor> FN(const Tensor& a, const P& attributes) {                \
        auto out = ttnn::device_operation::detail::launch<OP>(attributes, P##Inputs_of(a));          \
        g_launches.fetch_add(0, std::memory_order_relaxed);                                        \
        return out;                                                                                \
    }
namespace {
template <typename In, typename... T>
In inputs_of(const T&... t) {
    return In{{t...}};
}
#define MatmulParamsInputs_of inputs_of<MatmulInputs>
#define BinaryNgParamsInputs_of inputs_of<BinaryNgInputs>
#define Conv2dParamsInputs_of inputs_of<Conv2dInputs>
#define ReshardParamsInputs_of inputs_of<ReshardInputs>
#define SplitParamsInputs_of inputs_of<SplitInputs>
}  // namespace
TTNN_PRIM2(matmul, MatmulDeviceOperation, MatmulParams)
TTNN_PRIM2(binary_ng, BinaryNgDeviceOperation, BinaryNgParams)
TTNN_PRIM2(conv2d, Conv2dDeviceOperation, Conv2dParams)
TTNN_PRIM1(reshard, ReshardDeviceOperation, ReshardParams)
TTNN_PRIM1(split, SplitDeviceOperation, SplitParams)
}  // namespace prim

#define TTNN_ATTRS(P) prim::P##Params
#define TTNN_LAUNCH_MATMUL(a, b, attrs) prim::matmul(a, b, attrs)
#define TTNN_LAUNCH_BINARY(a, b, attrs) prim::binary_ng(a, b, attrs)
#define TTNN_LAUNCH_CONV2D(a, b, attrs) prim::conv2d(a, b, attrs)
#define TTNN_LAUNCH_RESHARD(a, attrs) prim::reshard(a, attrs)
#define TTNN_LAUNCH_SPLIT(a, attrs) prim::split(a, attrs)
#define TTNN_TOP(RET, FN, PYNAME) TTNN_OUT_OF_LINE RET FN
#define TTNN_CALL_ADD(a, b) ttnn::add(a, b)

#else  // 2025, g1

namespace operations {
#define TTNN_DEFINE_PRIM_INVOKE(OP)                                                                  \
    std::tuple<OP::operation_attributes_t, OP::tensor_args_t> OP::invoke(                              \
        const std::vector<Tensor>& input_tensors, const operation_attributes_t& attributes) {          \
        return {attributes, tensor_args_t{input_tensors}};                                             \
    }
namespace matmul {
TTNN_DEFINE_DEVICE_OPERATION(MatmulDeviceOperation)
TTNN_DEFINE_PRIM_INVOKE(MatmulDeviceOperation)
}  // namespace matmul
namespace binary {
TTNN_DEFINE_DEVICE_OPERATION(BinaryDeviceOperation)
TTNN_DEFINE_PRIM_INVOKE(BinaryDeviceOperation)
}  // namespace binary
namespace conv::conv2d {
TTNN_DEFINE_DEVICE_OPERATION(Conv2dDeviceOperation)
TTNN_DEFINE_PRIM_INVOKE(Conv2dDeviceOperation)
}  // namespace conv::conv2d
namespace data_movement {
TTNN_DEFINE_DEVICE_OPERATION(ReshardDeviceOperation)
TTNN_DEFINE_PRIM_INVOKE(ReshardDeviceOperation)
TTNN_DEFINE_DEVICE_OPERATION(SplitDeviceOperation)
TTNN_DEFINE_PRIM_INVOKE(SplitDeviceOperation)
}  // namespace data_movement
}  // namespace operations

namespace device_operation::detail {

// Upstream (ttnn/cpp/ttnn/device_operation.hpp, 2024-25): invoke > launch_on_single_device (outputs,
// then the mesh adapter for a MeshDevice tensor, launch_on_worker_thread for a Device's).
template <typename device_operation_t>
TTNN_OUT_OF_LINE typename device_operation_t::tensor_return_value_t invoke(
    QueueId cq_id, const typename device_operation_t::operation_attributes_t& operation_attributes,
    const typename device_operation_t::tensor_args_t& tensor_args) {
    OpFrame frame(device_operation_t::kName, TT_REPLICA_OP_DEVICE);
    auto tensor_return_value = launch_on_single_device<device_operation_t>(cq_id, operation_attributes, tensor_args);
    g_launches.fetch_add(0, std::memory_order_relaxed);
    return tensor_return_value;
}

template <typename device_operation_t>
TTNN_OUT_OF_LINE typename device_operation_t::tensor_return_value_t launch_on_single_device(
    QueueId cq_id, const typename device_operation_t::operation_attributes_t& operation_attributes,
    const typename device_operation_t::tensor_args_t& tensor_args) {
    OpFrame frame(device_operation_t::kName, TT_REPLICA_OP_DEVICE);
    auto tensor_return_value = device_operation_t::create_output_tensors(operation_attributes, tensor_args);
    IDevice* device = device_of(tensor_args.input_tensors);
    if (auto* mesh_device = dynamic_cast<ttnn::MeshDevice*>(device)) {
        launch_operation_with_adapter<MeshDeviceOperationAdapter<device_operation_t>>(
            cq_id, operation_attributes, tensor_args, tensor_return_value, mesh_device);
    } else {
        launch_on_worker_thread<device_operation_t>(cq_id, operation_attributes, tensor_args, tensor_return_value,
                                                    device);
    }
    return tensor_return_value;
}

// 2025's mesh adapter: a new id per program of the workload, at set_runtime_id.
template <typename mesh_device_operation_t>
TTNN_OUT_OF_LINE void launch_operation_with_adapter(
    QueueId cq_id, const typename mesh_device_operation_t::operation_attributes_t& operation_attributes,
    const typename mesh_device_operation_t::tensor_args_t& tensor_args,
    typename mesh_device_operation_t::tensor_return_value_t& tensor_return_value, ttnn::MeshDevice* mesh_device) {
    using Op = typename mesh_device_operation_t::device_operation_t;
    OpFrame frame(Op::kName, TT_REPLICA_OP_DEVICE);
    (void)cq_id;
    run_program<Op>(operation_attributes, tensor_args, tensor_return_value, mesh_device, IdWhen::AtSet, 0);
}

// The single-device path: the id is taken first (also when validation then throws), set after the
// cache lookup. Not an op frame (upstream's own function of the launch of the same device op).
template <typename device_operation_t>
TTNN_OUT_OF_LINE void launch_on_worker_thread(
    QueueId cq_id, const typename device_operation_t::operation_attributes_t& operation_attributes,
    const typename device_operation_t::tensor_args_t& tensor_args,
    typename device_operation_t::tensor_return_value_t& tensor_return_value, tt::tt_metal::IDevice* device) {
    (void)cq_id;
    const int64_t id = CoreIDs::instance().fetch_and_increment_device_operation_id();
    run_program<device_operation_t>(operation_attributes, tensor_args, tensor_return_value, device, IdWhen::Given,
                                    id);
}

}  // namespace device_operation::detail

// Every device op's launch functions are emitted (explicit instantiations), as upstream's are
// where ops are defined.
#define TTNN_INSTANTIATE(OP)                                                                                    \
    template OP::tensor_return_value_t invoke<OP>(QueueId, const OP::operation_attributes_t&,                   \
                                                  const OP::tensor_args_t&);                                    \
    template OP::tensor_return_value_t launch_on_single_device<OP>(QueueId, const OP::operation_attributes_t&, \
                                                                   const OP::tensor_args_t&);                   \
    template void launch_operation_with_adapter<MeshDeviceOperationAdapter<OP>>(                                \
        QueueId, const OP::operation_attributes_t&, const OP::tensor_args_t&, OP::tensor_return_value_t&,       \
        ttnn::MeshDevice*);                                                                                     \
    template void launch_on_worker_thread<OP>(QueueId, const OP::operation_attributes_t&,                       \
                                              const OP::tensor_args_t&, OP::tensor_return_value_t&,             \
                                              tt::tt_metal::IDevice*);
namespace device_operation::detail {
TTNN_INSTANTIATE(operations::matmul::MatmulDeviceOperation)
TTNN_INSTANTIATE(operations::binary::BinaryDeviceOperation)
TTNN_INSTANTIATE(operations::conv::conv2d::Conv2dDeviceOperation)
TTNN_INSTANTIATE(operations::data_movement::ReshardDeviceOperation)
TTNN_INSTANTIATE(operations::data_movement::SplitDeviceOperation)
}  // namespace device_operation::detail

// The registered prim (register_operation<"ttnn::prim::<op>", DeviceOperation>): its invoke is
// inline upstream; the device op's static invoke gives the attributes and tensor args.
template <typename Op>
inline std::vector<Tensor> prim_launch(const std::vector<Tensor>& inputs, const typename Op::operation_attributes_t& a) {
    auto [attributes, tensor_args] = Op::invoke(inputs, a);
    return ttnn::device_operation::detail::invoke<Op>(DefaultQueueId, attributes, tensor_args);
}

#define TTNN_ATTRS(P) StandInAttributes
#define TTNN_LAUNCH_MATMUL(a, b, attrs) prim_launch<operations::matmul::MatmulDeviceOperation>({a, b}, attrs)
#define TTNN_LAUNCH_BINARY(a, b, attrs) prim_launch<operations::binary::BinaryDeviceOperation>({a, b}, attrs)
#define TTNN_LAUNCH_CONV2D(a, b, attrs) prim_launch<operations::conv::conv2d::Conv2dDeviceOperation>({a, b}, attrs)
#define TTNN_LAUNCH_RESHARD(a, attrs) prim_launch<operations::data_movement::ReshardDeviceOperation>({a}, attrs)
#define TTNN_LAUNCH_SPLIT(a, attrs) prim_launch<operations::data_movement::SplitDeviceOperation>({a}, attrs)
#define TTNN_CALL_ADD(a, b) operations::binary::BinaryOperation<operations::binary::BinaryOpType::ADD>::invoke(a, b)

#endif

// ------------------------------------------------------------------ the ops as Python calls them

namespace {
// Sizes and CBs of the stand-in ops (README "TT-NN").
template <typename P>
P attrs(uint64_t out_bytes, BufferType type, uint32_t cb0, uint32_t cb1, uint32_t cb2, uint32_t grid) {
    P p;
    p.out_bytes = out_bytes;
    p.out_type = type;
    p.cb_bytes[0] = cb0;
    p.cb_bytes[1] = cb1;
    p.cb_bytes[2] = cb2;
    p.cb_grid = grid;
    return p;
}
uint64_t larger(const Tensor& a, const Tensor& b) { return a.bytes() > b.bytes() ? a.bytes() : b.bytes(); }
}  // namespace

#if TT_REPLICA_TTNN_ERA == TTNN_ERA_2026
#define TTNN_MATMUL_FN \
    TTNN_OUT_OF_LINE Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b)
#define TTNN_ADD_FN TTNN_OUT_OF_LINE Tensor add(const Tensor& a, const Tensor& b)
#define TTNN_CONV2D_FN TTNN_OUT_OF_LINE Tensor conv2d(const Tensor& x, const Tensor& w)
#define TTNN_RESHARD_FN TTNN_OUT_OF_LINE Tensor reshard(const Tensor& a, uint32_t shard_cores)
#define TTNN_SPLIT_FN TTNN_OUT_OF_LINE std::vector<Tensor> split(const Tensor& a, uint32_t parts, uint64_t part_bytes)
#else
#define TTNN_MATMUL_FN                                                                                             \
    TTNN_OUT_OF_LINE Tensor operations::matmul::MatmulOperation::invoke(const Tensor& a, const Tensor& b, bool transpose_a, \
                                                                        bool transpose_b)
#define TTNN_ADD_FN                                                                                              \
    template <>                                                                                                  \
    TTNN_OUT_OF_LINE Tensor operations::binary::BinaryOperation<operations::binary::BinaryOpType::ADD>::invoke(   \
        const Tensor& a, const Tensor& b)
#define TTNN_CONV2D_FN \
    TTNN_OUT_OF_LINE Tensor operations::conv::conv2d::Conv2dOperation::invoke(const Tensor& x, const Tensor& w)
#define TTNN_RESHARD_FN \
    TTNN_OUT_OF_LINE Tensor operations::data_movement::ReshardOperation::invoke(const Tensor& a, uint32_t shard_cores)
#define TTNN_SPLIT_FN                                                                                       \
    TTNN_OUT_OF_LINE std::vector<Tensor> operations::data_movement::SplitOperation::invoke(const Tensor& a, \
                                                                                      uint32_t parts,       \
                                                                                      uint64_t part_bytes)
#endif

// ttnn.matmul: one device op, output in DRAM (the larger input's size), three CBs on 4x4 cores.
TTNN_MATMUL_FN {
    OpFrame frame("ttnn.matmul", TT_REPLICA_OP_TOP);
    auto p = attrs<TTNN_ATTRS(Matmul)>(larger(a, b), BufferType::DRAM, 4096, 4096, 2048, 4);
    p.cb_bytes[3] = (transpose_a ? 1024 : 0) + (transpose_b ? 512 : 0);
    auto out = TTNN_LAUNCH_MATMUL(a, b, p);
    return out.at(0);
}

// ttnn.add: one device op, output in L1 (the larger input's size), three CBs on 8x8 cores.
TTNN_ADD_FN {
    OpFrame frame("ttnn.add", TT_REPLICA_OP_TOP);
    auto out = TTNN_LAUNCH_BINARY(a, b, attrs<TTNN_ATTRS(BinaryNg)>(larger(a, b), BufferType::L1, 2048, 2048, 2048, 8));
    return out.at(0);
}

// ttnn.conv2d, nested: its own allocation outside any device op (the prepared weights, DRAM,
// twice the weights, freed before it returns), a Conv2d launch (output DRAM, four CBs), a matmul
// launch through the matmul prim (output DRAM), then ttnn.add inside it (depth 2).
TTNN_CONV2D_FN {
    OpFrame frame("ttnn.conv2d", TT_REPLICA_OP_TOP);
    Tensor prepared = tt::tt_metal::allocate_tensor_on_device(w.device(), 2 * w.bytes(), BufferType::DRAM);
    auto cp = attrs<TTNN_ATTRS(Conv2d)>(x.bytes(), BufferType::DRAM, 8192, 4096, 2048, 2);
    cp.cb_bytes[3] = 1024;
    auto conv = TTNN_LAUNCH_CONV2D(x, prepared, cp);
    auto mm = TTNN_LAUNCH_MATMUL(conv.at(0), x, attrs<TTNN_ATTRS(Matmul)>(x.bytes(), BufferType::DRAM, 4096, 4096, 2048, 4));
    Tensor out = TTNN_CALL_ADD(mm.at(0), x);
    prepared.deallocate();
    return out;
}

// ttnn.reshard: output in L1 (the input's size) made before validation; a shard grid of 0 or
// more than 64 cores fails validation on a program cache miss (after the output was allocated).
TTNN_RESHARD_FN {
    OpFrame frame("ttnn.reshard", TT_REPLICA_OP_TOP);
    auto p = attrs<TTNN_ATTRS(Reshard)>(a.bytes(), BufferType::L1, 1024, 1024, 0, 2);
    p.shard_cores = shard_cores;
    p.check_cores = true;
    auto out = TTNN_LAUNCH_RESHARD(a, p);
    return out.at(0);
}

// ttnn.split: parts outputs of part_bytes each in L1, made one after the other (one that does not
// fit throws out of memory, after the earlier ones were allocated); two CBs on 2x2 cores.
TTNN_SPLIT_FN {
    OpFrame frame("ttnn.split", TT_REPLICA_OP_TOP);
    auto p = attrs<TTNN_ATTRS(Split)>(part_bytes, BufferType::L1, 2048, 2048, 0, 2);
    p.parts = parts;
    auto out = TTNN_LAUNCH_SPLIT(a, p);
    g_launches.fetch_add(0, std::memory_order_relaxed);
    return out;
}

// ttnn.traced_add: its first call on a device captures ttnn.add(a, b) in a trace (the trace calls
// and the nested add inside this op: the add at depth 2), each call replays it; the captured
// output is what it returns.
#if TT_REPLICA_TTNN_ERA == TTNN_ERA_2026
TTNN_OUT_OF_LINE Tensor traced_add(const Tensor& a, const Tensor& b)
#else
TTNN_OUT_OF_LINE Tensor operations::binary::TracedAddOperation::invoke(const Tensor& a, const Tensor& b)
#endif
{
    OpFrame frame("ttnn.traced_add", TT_REPLICA_OP_TOP);
    IDevice* device = device_of({a, b});
    DeviceCtx& ctx = ctx_of(device);
    if (!ctx.traced) {
        const uint32_t id = distributed::trace_begin(device);
        Tensor out = TTNN_CALL_ADD(a, b);
        distributed::trace_end(device, id);
        ctx.traced = true;
        ctx.traced_id = id;
        ctx.traced_out = out;
    }
    distributed::trace_execute(device, ctx.traced_id, true);
    return ctx.traced_out;
}

// ------------------------------------------------------------------ Metal trace (not ops)

namespace operations {
#if TT_REPLICA_TTNN_ERA == TTNN_ERA_2026
namespace trace {
MeshTraceId begin_trace_capture(MeshDevice* device, std::optional<QueueId> cq_id) {
    const QueueId cq = cq_id.value_or(DefaultQueueId);
    return device->begin_mesh_trace(device->mesh_command_queue(*cq));
}
void end_trace_capture(MeshDevice* device, MeshTraceId trace_id, std::optional<QueueId> cq_id) {
    const QueueId cq = cq_id.value_or(DefaultQueueId);
    device->end_mesh_trace(device->mesh_command_queue(*cq), trace_id);
}
void execute_trace(MeshDevice* device, MeshTraceId trace_id, std::optional<QueueId> cq_id, bool blocking) {
    const QueueId cq = cq_id.value_or(DefaultQueueId);
    device->replay_mesh_trace(device->mesh_command_queue(*cq), trace_id, blocking);
}
void release_trace(MeshDevice* device, MeshTraceId trace_id) { device->release_mesh_trace(trace_id); }
}  // namespace trace
#elif TT_REPLICA_TTNN_ERA == TTNN_ERA_2025
namespace trace {
MeshTraceId begin_mesh_trace_capture(MeshDevice* device, QueueId cq_id) {
    const MeshTraceId trace_id = tt::tt_metal::distributed::MeshTrace::next_id();
    device->begin_mesh_trace(*cq_id, trace_id);
    return trace_id;
}
void end_mesh_trace_capture(MeshDevice* device, MeshTraceId trace_id, QueueId cq_id) {
    device->end_mesh_trace(*cq_id, trace_id);
}
void execute_mesh_trace(MeshDevice* device, MeshTraceId trace_id, QueueId cq_id, bool blocking) {
    device->replay_mesh_trace(*cq_id, trace_id, blocking);
}
void release_mesh_trace(MeshDevice* device, MeshTraceId trace_id) { device->release_mesh_trace(trace_id); }
}  // namespace trace
#else
namespace core {
uint32_t begin_trace_capture(tt::tt_metal::Device* device, uint8_t cq_id) {
    const uint32_t tid = tt::tt_metal::Trace::next_id();
    device->begin_trace(cq_id, tid);
    return tid;
}
void end_trace_capture(tt::tt_metal::Device* device, uint32_t tid, uint8_t cq_id) { device->end_trace(cq_id, tid); }
void execute_trace(tt::tt_metal::Device* device, uint32_t tid, uint8_t cq_id, bool blocking) {
    device->replay_trace(cq_id, tid, blocking);
}
void release_trace(tt::tt_metal::Device* device, uint32_t tid) { device->release_trace(tid); }
}  // namespace core
#endif
}  // namespace operations

namespace distributed {
namespace {
#if TT_REPLICA_TTNN_ERA == TTNN_ERA_G1
tt::tt_metal::Device* trace_device(IDevice* device) {
    auto* d = dynamic_cast<tt::tt_metal::Device*>(device);
    if (d == nullptr) throw std::runtime_error("TT_FATAL: trace on a device ttnn did not open");
    return d;
}
#else
MeshDevice* trace_device(IDevice* device) {
    auto* d = dynamic_cast<MeshDevice*>(device);
    if (d == nullptr) throw std::runtime_error("TT_FATAL: trace on a device ttnn did not open");
    return d;
}
using tt::tt_metal::distributed::MeshTraceId;
#endif
}  // namespace

#if TT_REPLICA_TTNN_ERA == TTNN_ERA_2026
uint32_t trace_begin(IDevice* device) {
    return operations::trace::begin_trace_capture(trace_device(device), std::nullopt).get();
}
void trace_end(IDevice* device, uint32_t id) {
    operations::trace::end_trace_capture(trace_device(device), MeshTraceId(id), std::nullopt);
}
void trace_execute(IDevice* device, uint32_t id, bool blocking) {
    operations::trace::execute_trace(trace_device(device), MeshTraceId(id), std::nullopt, blocking);
}
void trace_release(IDevice* device, uint32_t id) {
    operations::trace::release_trace(trace_device(device), MeshTraceId(id));
}
#elif TT_REPLICA_TTNN_ERA == TTNN_ERA_2025
uint32_t trace_begin(IDevice* device) {
    return operations::trace::begin_mesh_trace_capture(trace_device(device), DefaultQueueId).get();
}
void trace_end(IDevice* device, uint32_t id) {
    operations::trace::end_mesh_trace_capture(trace_device(device), MeshTraceId(id), DefaultQueueId);
}
void trace_execute(IDevice* device, uint32_t id, bool blocking) {
    operations::trace::execute_mesh_trace(trace_device(device), MeshTraceId(id), DefaultQueueId, blocking);
}
void trace_release(IDevice* device, uint32_t id) {
    operations::trace::release_mesh_trace(trace_device(device), MeshTraceId(id));
}
#else
uint32_t trace_begin(IDevice* device) { return operations::core::begin_trace_capture(trace_device(device), DefaultQueueId); }
void trace_end(IDevice* device, uint32_t id) { operations::core::end_trace_capture(trace_device(device), id, DefaultQueueId); }
void trace_execute(IDevice* device, uint32_t id, bool blocking) {
    operations::core::execute_trace(trace_device(device), id, DefaultQueueId, blocking);
}
void trace_release(IDevice* device, uint32_t id) { operations::core::release_trace(trace_device(device), id); }
#endif

bool release_traced_add(IDevice* device) {
    DeviceCtx& ctx = ctx_of(device);
    if (!ctx.traced) return false;
    trace_release(device, ctx.traced_id);
    ctx.traced_out.deallocate();
    ctx.traced_out = Tensor();
    ctx.traced = false;
    return true;
}

}  // namespace distributed

// ------------------------------------------------------------------ devices

namespace distributed {

IDevice* open_mesh_device(int chip, bool dispatch_thread) {
    auto ctx = std::make_unique<DeviceCtx>();
    tt::tt_metal::Device* d = tt::tt_metal::CreateDevice(chip);
    ctx->chip = chip;
#if TT_REPLICA_TTNN_ERA == TTNN_ERA_G1
    ctx->device = d;
#else
    ctx->mesh = tt::tt_metal::distributed::MeshDevice::create({d});
    ctx->device = ctx->mesh.get();
#endif
    if (dispatch_thread) {
        ctx->has_thread = true;
        DeviceCtx* raw = ctx.get();
        ctx->worker = std::thread([raw] { raw->run(); });
    }
    IDevice* dev = ctx->device;
    std::lock_guard<std::mutex> lock(g_devices_mutex);
    devices()[dev] = std::move(ctx);
    return dev;
}

void clear_program_cache(IDevice* device) {
    DeviceCtx& ctx = ctx_of(device);
    std::lock_guard<std::mutex> launch(ctx.launch);
    ctx.cache.clear();
}

void close_mesh_device(IDevice* device) {
    std::unique_ptr<DeviceCtx> ctx;
    {
        std::lock_guard<std::mutex> lock(g_devices_mutex);
        auto it = devices().find(device);
        if (it == devices().end()) return;
        ctx = std::move(it->second);
        devices().erase(it);
    }
    if (ctx->has_thread) {
        {
            std::lock_guard<std::mutex> lock(ctx->mu);
            ctx->stop = true;
        }
        ctx->cv.notify_all();
        ctx->worker.join();
    }
    ctx->cache.clear();
    device->close();
}

}  // namespace distributed

}  // namespace ttnn

// Loading the TT-NN library turns on the truth's lists of every allocation and CB layout with its op.
__attribute__((constructor)) static void ttnn_standin_loaded() { tt_replica_ops_record(1); }
