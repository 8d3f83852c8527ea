// _ttnn.so: the stand-in of TT-NN's Python module. Upstream's nanobind module keeps, per op, a
// function pointer (2026 bind_function's overload_t) or the registered op object (2024-25) and
// calls it from its __call__; here a table of function pointers, filled when the module loads,
// is called from C entry points (ctypes from ttwork.py, dlsym from ttwork). The op a call runs
// is the function behind the pointer, in _ttnncpp.so. An op that throws is caught here, as the
// binding turns a C++ exception into a Python one: the entry point returns null / -1 and
// ttnn_last_error() says why.
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <typeinfo>
#include <vector>

#include "decorators.hpp"
#include "ttnn.hpp"

using ttnn::Tensor;

namespace {

// The bound functions, filled at load time (so every call is an indirect call).
struct Bound {
    Tensor (*matmul)(const Tensor&, const Tensor&, bool, bool);
    Tensor (*add)(const Tensor&, const Tensor&);
    Tensor (*conv2d)(const Tensor&, const Tensor&);
    Tensor (*reshard)(const Tensor&, uint32_t);
    std::vector<Tensor> (*split)(const Tensor&, uint32_t, uint64_t);
    Tensor (*traced_add)(const Tensor&, const Tensor&);
};
Bound g_bound;

// The classes the module binds: their RTTI is what upstream's module exports.
std::vector<const std::type_info*> g_classes;

#if TT_REPLICA_TTNN_ERA == TTNN_ERA_2026
const char kEra[] = "2026";
#elif TT_REPLICA_TTNN_ERA == TTNN_ERA_2025
const char kEra[] = "2025";
#else
const char kEra[] = "g1";
#endif

__attribute__((constructor)) void bind_module() {
#if TT_REPLICA_TTNN_ERA == TTNN_ERA_2026
    g_bound.matmul = &ttnn::matmul;
    g_bound.add = &ttnn::add;
    g_bound.conv2d = &ttnn::conv2d;
    g_bound.reshard = &ttnn::reshard;
    g_bound.split = &ttnn::split;
    g_bound.traced_add = &ttnn::traced_add;
    g_classes = {&typeid(ttnn::unique_wrapper_base<"matmul">), &typeid(ttnn::unique_wrapper_base<"add">),
                 &typeid(ttnn::unique_wrapper_base<"conv2d">), &typeid(ttnn::unique_wrapper_base<"reshard">),
                 &typeid(ttnn::unique_wrapper_base<"split">), &typeid(ttnn::unique_wrapper_base<"traced_add">)};
#else
    using namespace ttnn::operations;
    g_bound.matmul = &matmul::MatmulOperation::invoke;
    g_bound.add = &binary::BinaryOperation<binary::BinaryOpType::ADD>::invoke;
    g_bound.conv2d = &conv::conv2d::Conv2dOperation::invoke;
    g_bound.reshard = &data_movement::ReshardOperation::invoke;
    g_bound.split = &data_movement::SplitOperation::invoke;
    g_bound.traced_add = &binary::TracedAddOperation::invoke;
    g_classes = {&typeid(decltype(ttnn::matmul)),  &typeid(decltype(ttnn::add)),
                 &typeid(decltype(ttnn::conv2d)),  &typeid(decltype(ttnn::reshard)),
                 &typeid(decltype(ttnn::split)),   &typeid(decltype(ttnn::prim::matmul)),
                 &typeid(decltype(ttnn::prim::binary)), &typeid(decltype(ttnn::traced_add))};
#endif
}

thread_local std::string t_error;

Tensor* keep(Tensor t) { return new Tensor(std::move(t)); }

template <typename F>
void* call(F&& f) {
    try {
        t_error.clear();
        return keep(f());
    } catch (const std::exception& e) {
        t_error = e.what();
        return nullptr;
    }
}

// A call that returns nothing: 0, or -1 when it threw (t_error says why).
template <typename F>
int trace_call(F&& f) {
    try {
        t_error.clear();
        f();
        return 0;
    } catch (const std::exception& e) {
        t_error = e.what();
        return -1;
    }
}

}  // namespace

extern "C" {

const char* ttnn_era(void) { return kEra; }

// The Python name of the class bound at index i (the RTTI's name, demangled by the caller), or null.
const char* ttnn_bound_class(int i) {
    if (i < 0 || static_cast<std::size_t>(i) >= g_classes.size()) return nullptr;
    return g_classes[i]->name();
}

void* ttnn_open_device(int chip, int dispatch_thread) {
    try {
        return ttnn::distributed::open_mesh_device(chip, dispatch_thread != 0);
    } catch (const std::exception& e) {
        t_error = e.what();
        return nullptr;
    }
}

void ttnn_close_device(void* device) {
    ttnn::distributed::close_mesh_device(static_cast<tt::tt_metal::IDevice*>(device));
}

void ttnn_clear_program_cache(void* device) {
    ttnn::distributed::clear_program_cache(static_cast<tt::tt_metal::IDevice*>(device));
}

// A device tensor made outside any op (as ttnn.from_torch(..., device=) allocates). type: 0 DRAM, 1 L1.
void* ttnn_tensor(void* device, uint64_t bytes, int type) {
    return call([&] {
        return tt::tt_metal::allocate_tensor_on_device(static_cast<tt::tt_metal::IDevice*>(device), bytes,
                                                       type == 1 ? tt::tt_metal::BufferType::L1
                                                                 : tt::tt_metal::BufferType::DRAM);
    });
}

uint64_t ttnn_tensor_bytes(void* t) { return t ? static_cast<Tensor*>(t)->bytes() : 0; }

// Deallocates the tensor's buffer and forgets the handle (ttnn.deallocate + del).
void ttnn_free(void* t) {
    if (t == nullptr) return;
    auto* tensor = static_cast<Tensor*>(t);
    tensor->deallocate();
    delete tensor;
}

void* ttnn_matmul(void* a, void* b) {
    return call([&] { return g_bound.matmul(*static_cast<Tensor*>(a), *static_cast<Tensor*>(b), false, false); });
}

void* ttnn_add(void* a, void* b) {
    return call([&] { return g_bound.add(*static_cast<Tensor*>(a), *static_cast<Tensor*>(b)); });
}

void* ttnn_conv2d(void* x, void* w) {
    return call([&] { return g_bound.conv2d(*static_cast<Tensor*>(x), *static_cast<Tensor*>(w)); });
}

void* ttnn_reshard(void* a, uint32_t shard_cores) {
    return call([&] { return g_bound.reshard(*static_cast<Tensor*>(a), shard_cores); });
}

// Up to max_out outputs in out; returns how many, or -1 when the op threw.
int ttnn_split(void* a, uint32_t parts, uint64_t part_bytes, void** out, int max_out) {
    try {
        t_error.clear();
        std::vector<Tensor> v = g_bound.split(*static_cast<Tensor*>(a), parts, part_bytes);
        int n = 0;
        for (Tensor& t : v) {
            if (n < max_out) {
                out[n++] = keep(std::move(t));
            } else {
                t.deallocate();
            }
        }
        return n;
    } catch (const std::exception& e) {
        t_error = e.what();
        return -1;
    }
}

// ttnn.traced_add (its first call on a device captures a trace of ttnn.add, every call replays it):
// 0, or -1 when it threw. The output stays with the trace until ttnn_release_traced_add.
int ttnn_traced_add(void* a, void* b) {
    return call([&] { return g_bound.traced_add(*static_cast<Tensor*>(a), *static_cast<Tensor*>(b)); }) ? 0 : -1;
}

// Releases ttnn.traced_add's trace (outside any op) and deallocates its output: 0, -1 when none.
int ttnn_release_traced_add(void* device) {
    return ttnn::distributed::release_traced_add(static_cast<tt::tt_metal::IDevice*>(device)) ? 0 : -1;
}

// Metal trace as ttnn.begin_trace_capture / end_trace_capture / execute_trace / release_trace
// call it (upstream binds them with lambdas that call the function: not ops), on command queue 0.
// begin returns the trace id; each returns -1 when the call threw (ttnn_last_error says why).
int64_t ttnn_begin_trace_capture(void* device) {
    try {
        t_error.clear();
        return ttnn::distributed::trace_begin(static_cast<tt::tt_metal::IDevice*>(device));
    } catch (const std::exception& e) {
        t_error = e.what();
        return -1;
    }
}

int ttnn_end_trace_capture(void* device, uint32_t id) {
    return trace_call([&] { ttnn::distributed::trace_end(static_cast<tt::tt_metal::IDevice*>(device), id); });
}

int ttnn_execute_trace(void* device, uint32_t id, int blocking) {
    return trace_call(
        [&] { ttnn::distributed::trace_execute(static_cast<tt::tt_metal::IDevice*>(device), id, blocking != 0); });
}

int ttnn_release_trace(void* device, uint32_t id) {
    return trace_call([&] { ttnn::distributed::trace_release(static_cast<tt::tt_metal::IDevice*>(device), id); });
}

const char* ttnn_last_error(void) { return t_error.c_str(); }

}  // extern "C"
