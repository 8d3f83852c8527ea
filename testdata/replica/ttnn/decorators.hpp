// The types whose RTTI the Python module (_ttnn.so) exports, as upstream's bindings do
// (docs/ttmetal.md §13): 2024-25 ttnn::decorators::registered_operation_t<reflect::fixed_string
// "ttnn::<op>", op_t[, bool auto_launch_op]> (the Python name is the string with "::" as "."),
// 2026 ttnn::unique_wrapper_base<unique_string "op", unique_string "ttnn."> (bind_function's
// wrapper class). Written from upstream's declarations, not its code.
#pragma once

#include <array>
#include <cstddef>
#include <utility>

#include "ttnn.hpp"

#if TT_REPLICA_TTNN_ERA != TTNN_ERA_2026
namespace reflect {
// boost-ext/reflect's fixed_string: Size characters and a terminating zero, a structural type so
// it can be a template argument. Its inline namespace is the reflect release (v1.1.1 in 2024-25
// builds, cmake/dependencies.cmake).
inline namespace v1_1_1 {
template <class T, std::size_t Size>
struct fixed_string {
    constexpr fixed_string(const T* text) {
        for (std::size_t i = 0; i < Size; ++i) data[i] = text[i];
        data[Size] = T();
    }
    constexpr std::size_t size() const { return Size; }
    T data[Size + 1];
};
template <class T, std::size_t Capacity, std::size_t Size = Capacity - 1>
fixed_string(const T (&)[Capacity]) -> fixed_string<T, Size>;
}  // namespace v1_1_1
}  // namespace reflect

namespace ttnn::decorators {
#if TT_REPLICA_TTNN_ERA == TTNN_ERA_G1
template <reflect::fixed_string cpp_fully_qualified_name, typename operation_t, bool auto_launch_op>
#else
template <reflect::fixed_string cpp_fully_qualified_name, typename operation_t>
#endif
struct registered_operation_t {
    // Inline upstream (the call goes straight to operation_t::invoke, out of line).
    template <typename... Args>
    auto operator()(Args&&... args) const {
        return operation_t::invoke(std::forward<Args>(args)...);
    }
};

#if TT_REPLICA_TTNN_ERA == TTNN_ERA_G1
template <reflect::fixed_string name, typename operation_t>
constexpr auto register_operation() {
    return registered_operation_t<name, operation_t, false>{};
}
template <reflect::fixed_string name, typename operation_t>
constexpr auto register_operation_with_auto_launch_op() {
    return registered_operation_t<name, operation_t, true>{};
}
#else
template <reflect::fixed_string name, typename operation_t>
constexpr auto register_operation() {
    return registered_operation_t<name, operation_t>{};
}
#define register_operation_with_auto_launch_op register_operation
#endif
}  // namespace ttnn::decorators

namespace ttnn {
using decorators::register_operation;
using decorators::register_operation_with_auto_launch_op;
constexpr auto matmul = register_operation<"ttnn::matmul", operations::matmul::MatmulOperation>();
constexpr auto add = register_operation<"ttnn::add", operations::binary::BinaryOperation<operations::binary::BinaryOpType::ADD>>();
constexpr auto conv2d = register_operation_with_auto_launch_op<"ttnn::conv2d", operations::conv::conv2d::Conv2dOperation>();
constexpr auto reshard = register_operation<"ttnn::reshard", operations::data_movement::ReshardOperation>();
constexpr auto split = register_operation<"ttnn::split", operations::data_movement::SplitOperation>();
constexpr auto traced_add = register_operation<"ttnn::traced_add", operations::binary::TracedAddOperation>();
namespace prim {
// Primitive ops: the device operation is op_t (its static invoke is not an op: pass-through).
constexpr auto matmul = register_operation<"ttnn::prim::matmul", operations::matmul::MatmulDeviceOperation>();
constexpr auto binary = register_operation<"ttnn::prim::binary", operations::binary::BinaryDeviceOperation>();
}  // namespace prim
}  // namespace ttnn

#else

namespace ttnn {
template <std::size_t N>
struct unique_string {
    std::array<char, N> data;
    constexpr unique_string(const char (&str)[N]) {
        for (std::size_t i = 0; i < N; ++i) data[i] = str[i];
    }
};
template <unique_string Name, unique_string Namespace = unique_string{"ttnn."}>
struct unique_wrapper_base {
    const char* name_;
};
}  // namespace ttnn

#endif
