// TT-NN stand-in (_ttnncpp.so), issue #31: ops with upstream's mangled names for one era, chosen
// at build time (Makefile TTNN_ERA, docs/ttmetal.md §13, testdata/replica/README.md "TT-NN"):
//   2026  ttnn::<op> free functions, ttnn::prim::<op> pass-through functions,
//         ttnn::device_operation::detail::launch<Op> and
//         launch_operation_with_adapter<MeshDeviceOperationAdapter<Op>>(attrs, args, ret&, MeshDevice*);
//         tensors on a MeshDevice.
//   2025  ttnn::decorators::registered_operation_t<reflect::fixed_string, op_t> (RTTI in _ttnn.so)
//         and op_t::invoke; prims registered as "ttnn::prim::<op>" with the device op as op_t;
//         detail::invoke<Op>(QueueId, ...) > launch_on_single_device<Op>(QueueId, ...) >
//         launch_operation_with_adapter<MeshDeviceOperationAdapter<Op>>(QueueId, ..., MeshDevice*);
//         tensors on a MeshDevice.
//   g1    (2024) registered_operation_t<fixed_string, op_t, bool auto_launch_op> and op_t::invoke;
//         detail::invoke<Op>(uint8_t, ...) > launch_on_single_device<Op>(uint8_t, ...) >
//         launch_on_worker_thread<Op>(uint8_t, ..., IDevice*); tensors on a Device.
// Written from upstream's declarations (their shapes and names), not from its code. Every op
// function enters and leaves an op frame of the replica's truth (tt_replica_op_enter/leave).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "tt_metal/replica.hpp"

#define TTNN_ERA_2026 2026
#define TTNN_ERA_2025 2025
#define TTNN_ERA_G1 2024
#ifndef TT_REPLICA_TTNN_ERA
#error "build with -DTT_REPLICA_TTNN_ERA=2026|2025|2024 (Makefile TTNN_ERA=2026|2025|g1)"
#endif

// Op functions stay whole and out of line: GCC may otherwise call a local clone (IPA-SRA) of an
// exported function from inside the library, and an entry probe on the symbol would miss it.
#if defined(__clang__)
#define TTNN_OUT_OF_LINE __attribute__((noinline))
#else
#define TTNN_OUT_OF_LINE __attribute__((noipa))
#endif

namespace tt::tt_metal {

// A device tensor: an owning Buffer (on a Device) or MeshBuffer (on a MeshDevice).
class Tensor {
public:
    Tensor() = default;
    Tensor(std::shared_ptr<Buffer> buffer, IDevice* device, uint64_t bytes, BufferType type);
    Tensor(std::shared_ptr<distributed::MeshBuffer> buffer, IDevice* device, uint64_t bytes, BufferType type);

    IDevice* device() const { return device_; }
    uint64_t bytes() const { return bytes_; }
    BufferType buffer_type() const { return type_; }
    bool is_allocated() const { return buffer_ != nullptr || mesh_buffer_ != nullptr; }
    void deallocate();

private:
    std::shared_ptr<Buffer> buffer_;
    std::shared_ptr<distributed::MeshBuffer> mesh_buffer_;
    IDevice* device_ = nullptr;
    uint64_t bytes_ = 0;
    BufferType type_ = BufferType::DRAM;
};

// Upstream: allocate_tensor_on_device (not an op). A MeshDevice gets a MeshBuffer.
Tensor allocate_tensor_on_device(IDevice* device, uint64_t bytes, BufferType type);

}  // namespace tt::tt_metal

namespace ttnn {

using tt::tt_metal::Tensor;
using MeshDevice = tt::tt_metal::distributed::MeshDevice;

// Upstream ttnn/cpp/ttnn/core.hpp CoreIDs: the device-operation id counter, from 0.
class CoreIDs {
public:
    static CoreIDs& instance();
    int64_t fetch_and_increment_device_operation_id();

private:
    CoreIDs() = default;
    std::atomic<int64_t> device_operation_id_{0};
};

#if TT_REPLICA_TTNN_ERA != TTNN_ERA_G1
}  // namespace ttnn
namespace tt::stl {
// 2025-26 tt_stl/strong_type.hpp's StrongType, as far as mangling and ABI go.
template <typename T, typename Tag>
class StrongType {
public:
    constexpr explicit StrongType(T v) : value_(v) {}
    constexpr T operator*() const { return value_; }

private:
    T value_;
};
}  // namespace tt::stl
namespace ttnn {
using QueueId = tt::stl::StrongType<uint8_t, struct QueueIdTag>;
inline constexpr QueueId DefaultQueueId = QueueId(0);
#else
using QueueId = uint8_t;
inline constexpr uint8_t DefaultQueueId = 0;
#endif

// What every stand-in device op is told (the replica's stand-in for each op's own attributes):
// its outputs (parts of out_bytes each, of out_type), its CBs, whether validation fails.
struct StandInAttributes {
    uint64_t out_bytes = 0;
    uint32_t parts = 1;
    tt::tt_metal::BufferType out_type = tt::tt_metal::BufferType::DRAM;
    uint32_t cb_bytes[4] = {0, 0, 0, 0};
    uint32_t cb_grid = 1;       // CBs on cores (0,0)..(cb_grid-1, cb_grid-1)
    uint32_t shard_cores = 0;   // reshard: 0 or > 64 is invalid (validate_on_program_cache_miss throws)
    bool check_cores = false;
};

// Per device op: its short type name (get_operation_name), the static functions the launch
// functions call (defined in ttnncpp.cpp), and for 2024-25 the primitive's invoke (exported,
// returns the attributes and tensor args, not an op).
#define TTNN_STANDIN_DEVICE_OPERATION(NAME, ATTRS, ARGS)                                                   \
    struct NAME {                                                                                        \
        static constexpr const char* kName = #NAME;                                                      \
        using operation_attributes_t = ATTRS;                                                            \
        using tensor_args_t = ARGS;                                                                      \
        using tensor_return_value_t = std::vector<Tensor>;                                               \
        static void validate_on_program_cache_miss(const operation_attributes_t&, const tensor_args_t&); \
        static tensor_return_value_t create_output_tensors(const operation_attributes_t&,                \
                                                           const tensor_args_t&);                        \
        static uint64_t compute_program_hash(const operation_attributes_t&, const tensor_args_t&);       \
        static void create_program(tt::tt_metal::Program& program, const operation_attributes_t&,        \
                                   const tensor_args_t&, tensor_return_value_t&);                        \
        TTNN_PRIM_INVOKE                                                                                 \
    }

#if TT_REPLICA_TTNN_ERA == TTNN_ERA_2026
#define TTNN_PRIM_INVOKE
namespace prim {
#define TTNN_PARAMS(P)                          \
    struct P##Params : StandInAttributes {};    \
    struct P##Inputs {                          \
        std::vector<Tensor> input_tensors;      \
    };
TTNN_PARAMS(Matmul)
TTNN_PARAMS(BinaryNg)
TTNN_PARAMS(Conv2d)
TTNN_PARAMS(Reshard)
TTNN_PARAMS(Split)
#undef TTNN_PARAMS
TTNN_STANDIN_DEVICE_OPERATION(MatmulDeviceOperation, MatmulParams, MatmulInputs);
TTNN_STANDIN_DEVICE_OPERATION(BinaryNgDeviceOperation, BinaryNgParams, BinaryNgInputs);
TTNN_STANDIN_DEVICE_OPERATION(Conv2dDeviceOperation, Conv2dParams, Conv2dInputs);
TTNN_STANDIN_DEVICE_OPERATION(ReshardDeviceOperation, ReshardParams, ReshardInputs);
TTNN_STANDIN_DEVICE_OPERATION(SplitDeviceOperation, SplitParams, SplitInputs);

// Pass-through prims (upstream matmul_device_operation.cpp's ttnn::prim::matmul): no op frame.
std::vector<Tensor> matmul(const Tensor& a, const Tensor& b, const MatmulParams& attributes);
std::vector<Tensor> binary_ng(const Tensor& a, const Tensor& b, const BinaryNgParams& attributes);
std::vector<Tensor> conv2d(const Tensor& x, const Tensor& w, const Conv2dParams& attributes);
std::vector<Tensor> reshard(const Tensor& a, const ReshardParams& attributes);
std::vector<Tensor> split(const Tensor& a, const SplitParams& attributes);
}  // namespace prim

namespace device_operation {
template <typename DeviceOperation>
struct MeshDeviceOperationAdapter {
    using device_operation_t = DeviceOperation;
    using operation_attributes_t = typename DeviceOperation::operation_attributes_t;
    using tensor_args_t = typename DeviceOperation::tensor_args_t;
    using tensor_return_value_t = typename DeviceOperation::tensor_return_value_t;
};
namespace detail {
template <typename device_operation_t>
typename device_operation_t::tensor_return_value_t launch(
    const typename device_operation_t::operation_attributes_t& operation_attributes,
    const typename device_operation_t::tensor_args_t& tensor_args);
template <typename mesh_device_operation_t>
void launch_operation_with_adapter(const typename mesh_device_operation_t::operation_attributes_t& operation_attributes,
                                   const typename mesh_device_operation_t::tensor_args_t& tensor_args,
                                   typename mesh_device_operation_t::tensor_return_value_t& tensor_return_value,
                                   ttnn::MeshDevice* mesh_device);
}  // namespace detail
}  // namespace device_operation

// The ops as Python calls them (ttnn.<op>, bound with bind_function: a function pointer).
Tensor matmul(const Tensor& input_tensor_a, const Tensor& input_tensor_b, bool transpose_a = false,
              bool transpose_b = false);
Tensor add(const Tensor& input_tensor_a, const Tensor& input_tensor_b);
Tensor conv2d(const Tensor& input_tensor, const Tensor& weight_tensor);
Tensor reshard(const Tensor& input_tensor, uint32_t shard_cores);
std::vector<Tensor> split(const Tensor& input_tensor, uint32_t parts, uint64_t part_bytes);

#else  // 2025, g1

namespace operations {
struct StandInInputs {
    std::vector<Tensor> input_tensors;
};
#define TTNN_PRIM_INVOKE                                                                   \
    static std::tuple<operation_attributes_t, tensor_args_t> invoke(                       \
        const std::vector<Tensor>& input_tensors, const operation_attributes_t& attributes);
namespace matmul {
TTNN_STANDIN_DEVICE_OPERATION(MatmulDeviceOperation, StandInAttributes, StandInInputs);
struct MatmulOperation {
    static Tensor invoke(const Tensor& input_tensor_a, const Tensor& input_tensor_b, bool transpose_a = false,
                         bool transpose_b = false);
};
}  // namespace matmul
namespace binary {
enum class BinaryOpType { ADD, SUB, MUL };
TTNN_STANDIN_DEVICE_OPERATION(BinaryDeviceOperation, StandInAttributes, StandInInputs);
template <BinaryOpType binary_op_type>
struct BinaryOperation {
    static Tensor invoke(const Tensor& input_tensor_a, const Tensor& input_tensor_b);
};
template <>
Tensor BinaryOperation<BinaryOpType::ADD>::invoke(const Tensor& input_tensor_a, const Tensor& input_tensor_b);
}  // namespace binary
namespace conv::conv2d {
TTNN_STANDIN_DEVICE_OPERATION(Conv2dDeviceOperation, StandInAttributes, StandInInputs);
struct Conv2dOperation {
    static Tensor invoke(const Tensor& input_tensor, const Tensor& weight_tensor);
};
}  // namespace conv::conv2d
namespace data_movement {
TTNN_STANDIN_DEVICE_OPERATION(ReshardDeviceOperation, StandInAttributes, StandInInputs);
TTNN_STANDIN_DEVICE_OPERATION(SplitDeviceOperation, StandInAttributes, StandInInputs);
struct ReshardOperation {
    static Tensor invoke(const Tensor& input_tensor, uint32_t shard_cores);
};
struct SplitOperation {
    static std::vector<Tensor> invoke(const Tensor& input_tensor, uint32_t parts, uint64_t part_bytes);
};
}  // namespace data_movement
}  // namespace operations

namespace device_operation {
template <typename DeviceOperation>
struct MeshDeviceOperationAdapter {
    using device_operation_t = DeviceOperation;
    using operation_attributes_t = typename DeviceOperation::operation_attributes_t;
    using tensor_args_t = typename DeviceOperation::tensor_args_t;
    using tensor_return_value_t = typename DeviceOperation::tensor_return_value_t;
};
namespace detail {
template <typename device_operation_t>
typename device_operation_t::tensor_return_value_t invoke(
    QueueId cq_id, const typename device_operation_t::operation_attributes_t& operation_attributes,
    const typename device_operation_t::tensor_args_t& tensor_args);
template <typename device_operation_t>
typename device_operation_t::tensor_return_value_t launch_on_single_device(
    QueueId cq_id, const typename device_operation_t::operation_attributes_t& operation_attributes,
    const typename device_operation_t::tensor_args_t& tensor_args);
template <typename mesh_device_operation_t>
void launch_operation_with_adapter(QueueId cq_id,
                                   const typename mesh_device_operation_t::operation_attributes_t& operation_attributes,
                                   const typename mesh_device_operation_t::tensor_args_t& tensor_args,
                                   typename mesh_device_operation_t::tensor_return_value_t& tensor_return_value,
                                   ttnn::MeshDevice* mesh_device);
template <typename device_operation_t>
void launch_on_worker_thread(QueueId cq_id,
                             const typename device_operation_t::operation_attributes_t& operation_attributes,
                             const typename device_operation_t::tensor_args_t& tensor_args,
                             typename device_operation_t::tensor_return_value_t& tensor_return_value,
                             tt::tt_metal::IDevice* device);
}  // namespace detail
}  // namespace device_operation

#endif
#undef TTNN_PRIM_INVOKE

// ttnn.traced_add (a stand-in op, no upstream counterpart): on its first call on a device it
// captures a Metal trace of ttnn.add(a, b) (begin_trace_capture, the nested add, end_trace_capture),
// then, on that call and every later one, replays it (execute_trace) and returns the captured
// output. Its trace calls are made inside an op, as a user's composite that captures its first
// run and replays the next (a TraceContext-style helper) makes them.
#if TT_REPLICA_TTNN_ERA == TTNN_ERA_2026
Tensor traced_add(const Tensor& input_tensor_a, const Tensor& input_tensor_b);
#else
namespace operations::binary {
struct TracedAddOperation {
    static Tensor invoke(const Tensor& input_tensor_a, const Tensor& input_tensor_b);
};
}  // namespace operations::binary
#endif

// Metal trace as TT-NN users call it (ttnn.begin_trace_capture, ttnn.end_trace_capture,
// ttnn.execute_trace, ttnn.release_trace): plain functions, not ops (no frame; tttrace's op table
// has none of them: docs/ttmetal.md §13). Upstream's shapes per era:
//   2026  ttnn/cpp/ttnn/operations/trace.cpp, ttnn::operations::trace, on a MeshDevice, cq_id
//         optional, through the MeshDevice's MeshCommandQueue& (begin_mesh_trace(cq) takes the id);
//   2025  the same file: begin_mesh_trace_capture & co. (MeshTrace::next_id(), then the cq-id
//         forms of MeshDevice's trace calls), beside single-device forms on an IDevice*;
//   g1    ttnn/cpp/ttnn/operations/core/core.cpp, ttnn::operations::core, on a Device
//         (Trace::next_id(), then Device::begin_trace/end_trace/replay_trace(cq, tid, blocking)/
//         release_trace; upstream pushes each to the device's worker, which runs it inline in
//         synchronous mode, as here).
namespace operations {
#if TT_REPLICA_TTNN_ERA == TTNN_ERA_2026
namespace trace {
using MeshTraceId = tt::tt_metal::distributed::MeshTraceId;
MeshTraceId begin_trace_capture(MeshDevice* device, std::optional<QueueId> cq_id);
void end_trace_capture(MeshDevice* device, MeshTraceId trace_id, std::optional<QueueId> cq_id);
void execute_trace(MeshDevice* device, MeshTraceId trace_id, std::optional<QueueId> cq_id, bool blocking);
void release_trace(MeshDevice* device, MeshTraceId trace_id);
}  // namespace trace
#elif TT_REPLICA_TTNN_ERA == TTNN_ERA_2025
namespace trace {
using MeshTraceId = tt::tt_metal::distributed::MeshTraceId;
MeshTraceId begin_mesh_trace_capture(MeshDevice* device, QueueId cq_id);
void end_mesh_trace_capture(MeshDevice* device, MeshTraceId trace_id, QueueId cq_id);
void execute_mesh_trace(MeshDevice* device, MeshTraceId trace_id, QueueId cq_id, bool blocking);
void release_mesh_trace(MeshDevice* device, MeshTraceId trace_id);
}  // namespace trace
#else
namespace core {
uint32_t begin_trace_capture(tt::tt_metal::Device* device, uint8_t cq_id);
void end_trace_capture(tt::tt_metal::Device* device, uint32_t tid, uint8_t cq_id);
void execute_trace(tt::tt_metal::Device* device, uint32_t tid, uint8_t cq_id, bool blocking);
void release_trace(tt::tt_metal::Device* device, uint32_t tid);
}  // namespace core
#endif
}  // namespace operations

// Devices the ops run on (upstream: ttnn::distributed::open_mesh_device; not ops). 2026 and 2025:
// a MeshDevice over the chip; g1: the Device. dispatch_thread: programs are enqueued (CBs laid
// out, dispatched) on the device's own dispatch thread while the launching thread waits, so the
// layout happens on a thread where no op is live.
namespace distributed {
tt::tt_metal::IDevice* open_mesh_device(int chip, bool dispatch_thread);
void close_mesh_device(tt::tt_metal::IDevice* device);
void clear_program_cache(tt::tt_metal::IDevice* device);
// Releases ttnn.traced_add's trace on the device (release_trace, outside any op) and deallocates
// its captured output; false when it captured none.
bool release_traced_add(tt::tt_metal::IDevice* device);
// The era's trace calls above on a device the stand-in opened (a MeshDevice, or g1's Device), the
// id as an integer, cq 0: for the module's entry points and ttnn.traced_add. Not ops (a namespace
// below ttnn: tttrace's op table takes free functions of ttnn itself only).
uint32_t trace_begin(tt::tt_metal::IDevice* device);
void trace_end(tt::tt_metal::IDevice* device, uint32_t id);
void trace_execute(tt::tt_metal::IDevice* device, uint32_t id, bool blocking);
void trace_release(tt::tt_metal::IDevice* device, uint32_t id);
}  // namespace distributed

}  // namespace ttnn
