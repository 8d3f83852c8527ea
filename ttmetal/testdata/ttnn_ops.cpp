// A TT-NN library's op functions as each era names them (issue #31), for
// ops_test.go: FindOps must find exactly what ttnn_ops_truth() lists, with
// the addresses the compiler's own symbol table gives.
//
//   -DTTNN_ERA=2026  ttnn::<op> free functions, device_operation::detail::launch<Op>
//                    and launch_operation_with_adapter<MeshDeviceOperationAdapter<Op>>
//   -DTTNN_ERA=2025  registered_operation_t<fixed_string, op_t> (its typeinfo
//                    exported), op_t::invoke, launch_on_single_device<Op>, invoke<Op>
//   -DTTNN_ERA=2024  registered_operation_t<fixed_string, op_t, bool>, launch_on_worker_thread<Op>
//   -DTTNN_NO_TYPEID (2024-25) no typeinfo of registered_operation_t
//
// Namespaces, templates and concepts follow upstream (docs/ttmetal.md,
// "TT-NN ops"); the bodies only keep the functions out of line.
#include <cstddef>
#include <cstdint>
#include <string>
#include <typeinfo>
#include <vector>

#define API __attribute__((visibility("default"), noinline))
// The launches the prim functions call keep their exported entry (noipa: no
// local clone takes their place), so the stripped copy has device ops too;
// the others may become local clones (`.isra.0`) that only .symtab names.
#if defined(__clang__)
#define API_ENTRY API
#else
#define API_ENTRY __attribute__((visibility("default"), noinline, noipa))
#endif

namespace tt::tt_metal {
struct Tensor {
    int v = 0;
    Tensor() = default;
    API Tensor(int x);  // a constructor: never an op
};
Tensor::Tensor(int x) : v(x) {}
}  // namespace tt::tt_metal

namespace ttnn {
using tt::tt_metal::Tensor;
volatile int sink;  // a variable of namespace ttnn: not a function

namespace device_operation {
template <typename T>
concept DeviceOperationConcept = requires { typename T::operation_attributes_t; };

template <typename DeviceOperation>
struct MeshDeviceOperationAdapter {
    using device_operation_t = DeviceOperation;
    using operation_attributes_t = typename DeviceOperation::operation_attributes_t;
    using tensor_args_t = typename DeviceOperation::tensor_args_t;
    using tensor_return_value_t = typename DeviceOperation::tensor_return_value_t;
};

namespace detail {
template <typename mesh_device_operation_t>
API void launch_operation_with_adapter(
    const typename mesh_device_operation_t::operation_attributes_t& a,
    const typename mesh_device_operation_t::tensor_args_t& t,
    typename mesh_device_operation_t::tensor_return_value_t& r) {
    sink = sink + a.k + t.in.v + r.v;
}

template <DeviceOperationConcept device_operation_t>
API void launch_on_worker_thread(
    int cq, const typename device_operation_t::operation_attributes_t& a,
    const typename device_operation_t::tensor_args_t& t) {
    sink = sink + cq + a.k + t.in.v;
}

template <DeviceOperationConcept device_operation_t>
API typename device_operation_t::tensor_return_value_t launch_on_single_device(
    int cq, const typename device_operation_t::operation_attributes_t& a,
    const typename device_operation_t::tensor_args_t& t) {
    typename device_operation_t::tensor_return_value_t r{a.k};
#if TTNN_ERA == 2024
    launch_on_worker_thread<device_operation_t>(cq, a, t);
#else
    launch_operation_with_adapter<MeshDeviceOperationAdapter<device_operation_t>>(a, t, r);
#endif
    return r;
}

template <DeviceOperationConcept device_operation_t>
API_ENTRY typename device_operation_t::tensor_return_value_t invoke(
    int cq, const typename device_operation_t::operation_attributes_t& a,
    const typename device_operation_t::tensor_args_t& t) {
    return launch_on_single_device<device_operation_t>(cq, a, t);
}

template <DeviceOperationConcept device_operation_t>
API_ENTRY typename device_operation_t::tensor_return_value_t launch(
    const typename device_operation_t::operation_attributes_t& a,
    const typename device_operation_t::tensor_args_t& t) {
    typename device_operation_t::tensor_return_value_t r{a.k};
    launch_operation_with_adapter<MeshDeviceOperationAdapter<device_operation_t>>(a, t, r);
    return r;
}

// Not a launch: a helper of the same namespace, templated on the op.
template <typename device_operation_t>
API int compute_program_hash(const typename device_operation_t::operation_attributes_t& a) {
    return a.k * 31;
}
}  // namespace detail
}  // namespace device_operation

namespace operations {
namespace matmul {
struct MatmulDeviceOperation {
    struct operation_attributes_t { int k; };
    struct tensor_args_t { Tensor in; };
    using tensor_return_value_t = Tensor;
};
}  // namespace matmul
namespace binary {
enum class BinaryOpType { ADD, SUB };
template <BinaryOpType op>
struct BinaryDeviceOperation {
    struct operation_attributes_t { int k; };
    struct tensor_args_t { Tensor in; };
    using tensor_return_value_t = Tensor;
};
}  // namespace binary
}  // namespace operations

namespace prim {
// ttnn::prim::* only pass through: never ops.
API Tensor matmul(const Tensor& a, int k) {
    using Op = operations::matmul::MatmulDeviceOperation;
#if TTNN_ERA == 2026
    return device_operation::detail::launch<Op>(Op::operation_attributes_t{k}, Op::tensor_args_t{a});
#else
    return device_operation::detail::invoke<Op>(0, Op::operation_attributes_t{k}, Op::tensor_args_t{a});
#endif
}
template <operations::binary::BinaryOpType T>
API Tensor binary(const Tensor& a) {
    using Op = operations::binary::BinaryDeviceOperation<T>;
#if TTNN_ERA == 2026
    return device_operation::detail::launch<Op>(typename Op::operation_attributes_t{1}, typename Op::tensor_args_t{a});
#else
    return device_operation::detail::invoke<Op>(0, typename Op::operation_attributes_t{1}, typename Op::tensor_args_t{a});
#endif
}
template Tensor binary<operations::binary::BinaryOpType::ADD>(const Tensor&);
template Tensor binary<operations::binary::BinaryOpType::SUB>(const Tensor&);
}  // namespace prim

API std::string op_summary(const Tensor& t);  // defined below; [abi:cxx11] in its name
API bool operator==(const Tensor& a, const Tensor& b) { return a.v == b.v; }  // an operator: never an op

namespace detail {
API int helper(int x) { return x + sink; }  // ttnn::detail: never an op
}  // namespace detail
namespace operations::core {
API Tensor to_layout_impl(const Tensor& t) { return Tensor{t.v + 1}; }  // ttnn::operations::*: never an op
}  // namespace operations::core
}  // namespace ttnn

#if TTNN_ERA == 2026
// 2026: ops are free functions of namespace ttnn (and of ttnn::experimental,
// ttnn::transformer: Python's ttnn.experimental.*, ttnn.transformer.*),
// bound to Python through their address.
namespace ttnn {
API Tensor matmul(const Tensor& a, const Tensor& b) { return prim::matmul(a, b.v); }
API Tensor add(const Tensor& a, const Tensor& b) {
    auto lambda = [&](int x) { return prim::binary<operations::binary::BinaryOpType::ADD>(Tensor{a.v + x}); };
    return lambda(b.v);
}
API Tensor add(const Tensor& a, float b) { return prim::binary<operations::binary::BinaryOpType::ADD>(Tensor{a.v + (int)b}); }
API Tensor subtract(const Tensor& a, const Tensor& b) {
    return prim::binary<operations::binary::BinaryOpType::SUB>(Tensor{a.v - b.v});
}
API Tensor linear(const Tensor& a, const Tensor& b) { return add(matmul(a, b), b); }  // nested ops
template <typename T>
API T identity(const T& t) { return t; }  // a template: never an op
template Tensor identity<Tensor>(const Tensor&);
namespace experimental {
API Tensor nlp_concat_heads(const Tensor& a) { return matmul(a, a); }
}  // namespace experimental
namespace transformer {
API Tensor attention_softmax(const Tensor& a) { return matmul(a, a); }
}  // namespace transformer
API std::string op_summary(const Tensor& t) { return std::to_string(t.v); }
}  // namespace ttnn
#else
// 2024-25: ops are registered_operation_t objects whose op_t::invoke does
// the work; the typeinfo of registered_operation_t<name, op_t> names them.
namespace reflect::inline v1_2_2 {
template <class T, std::size_t Size>
struct fixed_string {
    constexpr fixed_string(const T* str) {
        for (std::size_t i{}; i < Size; ++i) data[i] = str[i];
        data[Size] = T();
    }
    constexpr auto operator<=>(const fixed_string&) const = default;
    T data[Size + 1];
};
template <class T, std::size_t Capacity, std::size_t Size = Capacity - 1>
fixed_string(const T (&str)[Capacity]) -> fixed_string<T, Size>;
}  // namespace reflect::inline v1_2_2

namespace ttnn {
namespace decorators {
#if TTNN_ERA == 2024
template <reflect::fixed_string cpp_fully_qualified_name, typename operation_t, bool auto_launch_op>
#else
template <reflect::fixed_string cpp_fully_qualified_name, typename operation_t>
#endif
struct registered_operation_t {
    template <typename... args_t>
    auto operator()(args_t&&... args) const { return operation_t::invoke(static_cast<args_t&&>(args)...); }
};
#if TTNN_ERA == 2024
template <reflect::fixed_string name, typename operation_t>
constexpr auto register_operation() { return registered_operation_t<name, operation_t, false>{}; }
#else
template <reflect::fixed_string name, typename operation_t>
constexpr auto register_operation() { return registered_operation_t<name, operation_t>{}; }
#endif
}  // namespace decorators

namespace operations {
namespace matmul {
struct MatmulOperation {
    API static Tensor invoke(const Tensor& a, const Tensor& b);
    API static Tensor invoke(const Tensor& a, int b);  // an overload: its own entry, same op
};
Tensor MatmulOperation::invoke(const Tensor& a, const Tensor& b) { return prim::matmul(a, b.v); }
Tensor MatmulOperation::invoke(const Tensor& a, int b) { return prim::matmul(a, b); }
struct NotRegistered {
    API static Tensor invoke(const Tensor& a);  // no registered_operation_t names it: not an op
};
Tensor NotRegistered::invoke(const Tensor& a) { return a; }
}  // namespace matmul
namespace binary {
template <BinaryOpType op>
struct BinaryOperation {
    API static Tensor invoke(const Tensor& a, const Tensor& b) { return prim::binary<op>(Tensor{a.v + b.v}); }
};
template struct BinaryOperation<BinaryOpType::ADD>;
template struct BinaryOperation<BinaryOpType::SUB>;
}  // namespace binary
namespace experimental {
struct NlpConcatHeadsOperation {
    API static Tensor invoke(const Tensor& a);
};
Tensor NlpConcatHeadsOperation::invoke(const Tensor& a) { return matmul::MatmulOperation::invoke(a, a); }
}  // namespace experimental
namespace primitive {
struct PrimMatmul {
    API static Tensor invoke(const Tensor& a);  // registered as ttnn::prim::*: passes through
};
Tensor PrimMatmul::invoke(const Tensor& a) { return prim::matmul(a, 1); }
}  // namespace primitive
}  // namespace operations

constexpr auto matmul = decorators::register_operation<"ttnn::matmul", operations::matmul::MatmulOperation>();
constexpr auto add = decorators::register_operation<
    "ttnn::add", operations::binary::BinaryOperation<operations::binary::BinaryOpType::ADD>>();
constexpr auto subtract = decorators::register_operation<
    "ttnn::subtract", operations::binary::BinaryOperation<operations::binary::BinaryOpType::SUB>>();
namespace experimental {
constexpr auto nlp_concat_heads = decorators::register_operation<
    "ttnn::experimental::nlp_concat_heads", operations::experimental::NlpConcatHeadsOperation>();
}
namespace prim {
constexpr auto prim_matmul = decorators::register_operation<"ttnn::prim::matmul", operations::primitive::PrimMatmul>();
}
API std::string op_summary(const Tensor& t) { return std::to_string(t.v); }
}  // namespace ttnn

// The Python bindings take each registered operation's typeid (nanobind's
// class_<registered_operation_t<...>>): the typeinfo is exported. With
// -DTTNN_NO_TYPEID, a library that defines the op functions but leaves the
// typeinfo to another (the Python module).
#if !defined(TTNN_NO_TYPEID)
API const std::type_info* ttnn_registered_types(int i) {
    static const std::type_info* types[] = {&typeid(ttnn::matmul), &typeid(ttnn::add), &typeid(ttnn::subtract),
                                            &typeid(ttnn::experimental::nlp_concat_heads),
                                            &typeid(ttnn::prim::prim_matmul)};
    return types[i % 5];
}
#endif
#endif
