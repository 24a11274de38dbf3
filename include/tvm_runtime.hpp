// tvm_runtime.hpp: a header-only C++17 wrapper over the C API of tvm_runtime.h.
//
// RAII handles for modules, functions, arrays and graph executors; every failed call throws
// tvmrt::Error carrying TVMGetLastError()'s message. No extra link dependency: link with
// libtvm_runtime.so as for the C API.
//
//   auto lib = tvmrt::Module::load("model/lib.so");
//   auto ex = tvmrt::GraphExecutor::from_factory(lib);       // or ::create(json, lib) + load_params
//   ex.set_input("data", input_floats);                       // shape and dtype are checked
//   ex.run();
//   std::vector<float> out = ex.get_output(0).to_vector<float>();
//
// Thread safety: as the C API. Handles may be copied (they share one reference-counted object)
// and used from several threads; one executor serialises concurrent calls.
#ifndef TVM_RUNTIME_RS_HPP_
#define TVM_RUNTIME_RS_HPP_

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tvm_runtime.h"

namespace tvmrt {

/// A failed runtime call; what() is TVMGetLastError()'s message ("<Kind>: <text>").
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline void check(int status) {
  if (status != 0) throw Error(TVMGetLastError());
}

namespace detail {
// Owns one reference of an object handle; copying takes another.
template <int (*Free)(void*)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(void* h) : h_(h) {}
  Handle(const Handle& o) : h_(o.h_) {
    if (h_) check(TVMObjectRetain(h_));
  }
  Handle(Handle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  Handle& operator=(Handle o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  ~Handle() {
    if (h_) Free(h_);
  }
  void* get() const { return h_; }
  explicit operator bool() const { return h_ != nullptr; }

 private:
  void* h_ = nullptr;
};

inline int free_module(void* h) { return TVMModFree(h); }
inline int free_function(void* h) { return TVMFuncFree(h); }
inline int free_object(void* h) { return TVMObjectFree(h); }
}  // namespace detail

class Module;
class NDArray;

/// A data type: code, bits, lanes.
struct DataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes = 1;
  template <typename T>
  static DataType of() {
    if constexpr (std::is_same_v<T, bool>) return {kDLUInt, 1, 1};
    else if constexpr (std::is_floating_point_v<T>) return {kDLFloat, uint8_t(sizeof(T) * 8), 1};
    else if constexpr (std::is_signed_v<T>) return {kDLInt, uint8_t(sizeof(T) * 8), 1};
    else return {kDLUInt, uint8_t(sizeof(T) * 8), 1};
  }
  bool operator==(const DataType& o) const { return code == o.code && bits == o.bits && lanes == o.lanes; }
  size_t bytes() const { return (size_t(bits) * lanes + 7) / 8; }
};

/// An owned NDArray (one reference).
class NDArray {
 public:
  NDArray() = default;
  /// Takes over a handle returned by the runtime (type code 13).
  explicit NDArray(TVMArrayHandle h) : h_(h) {}
  NDArray(const NDArray& o) : h_(o.h_) {
    if (h_) check(TVMObjectRetain(reinterpret_cast<char*>(h_) - 16));
  }
  NDArray(NDArray&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  NDArray& operator=(NDArray o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  ~NDArray() {
    if (h_) TVMArrayFree(h_);
  }

  /// A new zeroed CPU array.
  static NDArray empty(const std::vector<int64_t>& shape, DataType dtype) {
    TVMArrayHandle h = nullptr;
    check(TVMArrayAlloc(shape.data(), int(shape.size()), dtype.code, dtype.bits, dtype.lanes, kDLCPU, 0, &h));
    return NDArray(h);
  }
  /// A new CPU array holding a copy of `data` (its size must match the shape).
  template <typename T>
  static NDArray from_vector(const std::vector<int64_t>& shape, const std::vector<T>& data) {
    NDArray a = empty(shape, DataType::of<T>());
    a.copy_from(data.data(), data.size() * sizeof(T));
    return a;
  }

  TVMArrayHandle handle() const { return h_; }
  std::vector<int64_t> shape() const { return std::vector<int64_t>(h_->shape, h_->shape + h_->ndim); }
  DataType dtype() const { return {h_->dtype.code, h_->dtype.bits, h_->dtype.lanes}; }
  size_t num_elements() const {
    size_t n = 1;
    for (int i = 0; i < h_->ndim; i++) n *= size_t(h_->shape[i]);
    return n;
  }
  size_t nbytes() const { return num_elements() * dtype().bytes(); }

  void copy_from(const void* data, size_t nbytes) { check(TVMArrayCopyFromBytes(h_, const_cast<void*>(data), nbytes)); }
  void copy_to(void* data, size_t nbytes) const { check(TVMArrayCopyToBytes(h_, data, nbytes)); }
  /// The contents as a vector of T (T must match the dtype).
  template <typename T>
  std::vector<T> to_vector() const {
    if (!(DataType::of<T>() == dtype())) throw Error("TypeError: to_vector: element type does not match the array's dtype");
    std::vector<T> out(num_elements());
    copy_to(out.data(), out.size() * sizeof(T));
    return out;
  }

 private:
  TVMArrayHandle h_ = nullptr;
};

/// A value passed to or returned from a packed function.
class Value {
 public:
  Value() : code_(kTVMNullptr) { v_.v_handle = nullptr; }
  Value(int64_t v) : code_(kTVMArgInt) { v_.v_int64 = v; }
  Value(int v) : Value(int64_t(v)) {}
  Value(double v) : code_(kTVMArgFloat) { v_.v_float64 = v; }
  Value(const char* s) : code_(kTVMStr) { v_.v_str = s; }
  Value(const std::string& s) : Value(s.c_str()) {}
  Value(DLDevice d) : code_(kDLDevice) { v_.v_device = d; }
  Value(const NDArray& a) : code_(kTVMNDArrayHandle) { v_.v_handle = a.handle(); }
  Value(const TVMByteArray* b) : code_(kTVMBytes) { v_.v_handle = const_cast<TVMByteArray*>(b); }
  inline Value(const Module& m);
  static Value raw(TVMValue v, int code) {
    Value out;
    out.v_ = v;
    out.code_ = code;
    return out;
  }
  TVMValue value() const { return v_; }
  int code() const { return code_; }

 private:
  TVMValue v_;
  int code_;
};

/// What a call returned; owns object results.
class RetValue {
 public:
  RetValue(TVMValue v, int code) : v_(v), code_(code) {
    if (code_ == kTVMStr) str_ = v_.v_str;
    if (code_ == kTVMBytes) {
      auto* b = static_cast<TVMByteArray*>(v_.v_handle);
      str_.assign(b->data, b->size);
    }
  }
  RetValue(const RetValue&) = delete;
  RetValue& operator=(const RetValue&) = delete;
  RetValue(RetValue&& o) noexcept : v_(o.v_), code_(std::exchange(o.code_, kTVMNullptr)), str_(std::move(o.str_)) {}
  ~RetValue() {
    switch (code_) {
      case kTVMNDArrayHandle: TVMArrayFree(static_cast<TVMArrayHandle>(v_.v_handle)); break;
      case kTVMModuleHandle: TVMModFree(v_.v_handle); break;
      case kTVMPackedFuncHandle: TVMFuncFree(v_.v_handle); break;
      case kTVMObjectHandle: TVMObjectFree(v_.v_handle); break;
      default: break;
    }
  }
  int code() const { return code_; }
  int64_t to_int() const {
    expect(kTVMArgInt, "an int");
    return v_.v_int64;
  }
  /// Strings and bytes (copied out of the runtime's thread-local buffer).
  const std::string& to_string() const {
    if (code_ != kTVMStr && code_ != kTVMBytes) expect(kTVMStr, "a string");
    return str_;
  }
  NDArray to_ndarray() && {
    expect(kTVMNDArrayHandle, "an NDArray");
    code_ = kTVMNullptr;
    return NDArray(static_cast<TVMArrayHandle>(v_.v_handle));
  }
  inline Module to_module() &&;
  /// The value as an argument of another call (borrowed: this RetValue keeps owning it).
  Value as_arg() const { return Value::raw(v_, code_); }

 private:
  void expect(int code, const char* what) const {
    if (code_ != code) throw Error(std::string("TypeError: expected ") + what + ", got type code " + std::to_string(code_));
  }
  TVMValue v_;
  int code_;
  std::string str_;
};

/// A packed function.
class Function {
 public:
  Function() = default;
  explicit Function(TVMFunctionHandle h) : h_(h) {}
  /// A global function (`tvm.graph_executor.create`, `runtime.SaveParams`, ...).
  static Function global(const std::string& name) {
    TVMFunctionHandle h = nullptr;
    check(TVMFuncGetGlobal(name.c_str(), &h));
    if (!h) throw Error("AttributeError: no global function " + name);
    return Function(h);
  }
  explicit operator bool() const { return bool(h_); }

  template <typename... Args>
  RetValue operator()(const Args&... args) const {
    Value vals[] = {Value(), Value(args)...};
    TVMValue values[sizeof...(Args) + 1];
    int codes[sizeof...(Args) + 1];
    for (size_t i = 0; i < sizeof...(Args); i++) {
      values[i] = vals[i + 1].value();
      codes[i] = vals[i + 1].code();
    }
    TVMValue ret;
    int ret_code = kTVMNullptr;
    check(TVMFuncCall(h_.get(), values, codes, int(sizeof...(Args)), &ret, &ret_code));
    return RetValue(ret, ret_code);
  }

 private:
  detail::Handle<detail::free_function> h_;
};

/// A module: a loaded library, a factory or an executor.
class Module {
 public:
  Module() = default;
  explicit Module(TVMModuleHandle h) : h_(h) {}
  /// Loads an `export_library` shared object.
  static Module load(const std::string& path, const std::string& format = "") {
    TVMModuleHandle h = nullptr;
    check(TVMModLoadFromFile(path.c_str(), format.c_str(), &h));
    return Module(h);
  }
  TVMModuleHandle handle() const { return h_.get(); }
  /// The function `name`; throws if it does not exist.
  Function function(const std::string& name, bool query_imports = false) const {
    TVMFunctionHandle f = nullptr;
    check(TVMModGetFunction(h_.get(), name.c_str(), query_imports, &f));
    if (!f) throw Error("AttributeError: module has no function " + name);
    return Function(f);
  }

 private:
  detail::Handle<detail::free_module> h_;
};

inline Value::Value(const Module& m) : code_(kTVMModuleHandle) { v_.v_handle = m.handle(); }

inline Module RetValue::to_module() && {
  expect(kTVMModuleHandle, "a Module");
  code_ = kTVMNullptr;
  return Module(v_.v_handle);
}

/// What an executor holds, in bytes.
struct MemoryUsage {
  int64_t weights_owned = 0, weights_shared = 0, activations = 0, activations_shared = 0, workspace = 0;
};

/// A graph executor with typed calls.
class GraphExecutor {
 public:
  explicit GraphExecutor(Module m)
      : mod_(std::move(m)),
        set_input_(mod_.function("set_input")),
        run_(mod_.function("run")),
        get_output_(mod_.function("get_output")) {}

  /// A new executor from a library's embedded factory (its weights are shared, not copied).
  static GraphExecutor from_factory(const Module& lib, DLDevice dev = {kDLCPU, 0}) {
    return GraphExecutor(lib.function("default")(dev).to_module());
  }
  /// A new executor from a graph JSON and an operator library (weights via load_params).
  static GraphExecutor create(const std::string& graph_json, const Module& lib, DLDevice dev = {kDLCPU, 0}) {
    return GraphExecutor(Function::global("tvm.graph_executor.create")(graph_json, lib, int64_t(dev.device_type),
                                                                        int64_t(dev.device_id))
                             .to_module());
  }

  const Module& module() const { return mod_; }

  void load_params(const std::string& blob) const {
    TVMByteArray b{blob.data(), blob.size()};
    mod_.function("load_params")(&b);
  }
  void load_params_file(const std::string& path) const { load_params(read_file(path)); }

  /// Binds this executor's weights named in `params_blob` to `other`'s memory (no copy).
  void share_params(const GraphExecutor& other, const std::string& params_blob) const {
    TVMByteArray b{params_blob.data(), params_blob.size()};
    mod_.function("share_params")(other.mod_, &b);
  }
  /// Takes turns with `other` in one activation arena: a run while the other runs waits for it.
  void share_activations(const GraphExecutor& other) const { mod_.function("share_activations")(other.mod_); }
  /// A pool of at most `capacity` activation arenas on `dev` that executors join (`join_pool`):
  /// each run leases one, so memory follows the runs in flight, not the executors.
  static Module arena_pool(size_t capacity, DLDevice dev = {kDLCPU, 0}) {
    return Function::global("tvmrt.executor.ArenaPool")(int64_t(dev.device_type), int64_t(dev.device_id),
                                                         int64_t(capacity))
        .to_module();
  }
  /// Draws this executor's activations from `pool` (from `arena_pool`) from its next run on.
  void join_pool(const Module& pool) const { mod_.function("join_arena_pool")(pool); }

  void set_input(const std::string& name, const NDArray& value) const { set_input_(name, value); }
  /// Copies host data into input `name`; the element type must match the input's dtype.
  template <typename T>
  void set_input(const std::string& name, const std::vector<T>& data) const {
    NDArray in = get_input(name);
    if (!(DataType::of<T>() == in.dtype()) || data.size() != in.num_elements())
      throw Error("ValueError: set_input: '" + name + "' needs " + std::to_string(in.num_elements()) +
                  " elements of its own dtype");
    in.copy_from(data.data(), data.size() * sizeof(T));
  }
  NDArray get_input(const std::string& name) const {
    RetValue r = mod_.function("get_input")(name);
    if (r.code() == kTVMNullptr) throw Error("KeyError: no input named '" + name + "'");
    return std::move(r).to_ndarray();
  }
  void run() const { run_(); }
  NDArray get_output(int index) const { return get_output_(int64_t(index)).to_ndarray(); }
  int num_outputs() const { return int(mod_.function("get_num_outputs")().to_int()); }
  int num_inputs() const { return int(mod_.function("get_num_inputs")().to_int()); }
  /// The inputs `get_input_info` lists: once `load_params` has said which inputs are weights, the
  /// others (the data a host sets). As upstream: before it, and on an executor that got its weights
  /// from `share_params` or a factory, the weights are listed too.
  std::vector<std::string> input_names() const {
    RetValue info = mod_.function("get_input_info")();
    RetValue shapes = Function::global("runtime.MapGetItem")(info.as_arg(), "shape");
    RetValue items = Function::global("runtime.MapItems")(shapes.as_arg());  // key, value, key, value, ...
    int64_t n = Function::global("runtime.ArraySize")(items.as_arg()).to_int();
    Function item = Function::global("runtime.ArrayGetItem"), text = Function::global("runtime.GetFFIString");
    std::vector<std::string> names;
    for (int64_t k = 0; k < n; k += 2) {
      RetValue key = item(items.as_arg(), k);
      names.push_back(key.code() == kTVMStr ? key.to_string() : text(key.as_arg()).to_string());
    }
    return names;
  }

  MemoryUsage memory_usage() const {
    std::string json = mod_.function("get_memory_usage")().to_string();
    MemoryUsage m;
    auto field = [&](const char* key) -> int64_t {
      auto at = json.find(std::string("\"") + key + "\":");
      return at == std::string::npos ? 0 : std::stoll(json.substr(at + std::strlen(key) + 3));
    };
    m.weights_owned = field("weights_owned");
    m.weights_shared = field("weights_shared");
    m.activations = field("activations");
    m.activations_shared = field("activations_shared");
    m.workspace = field("workspace");
    return m;
  }

  static std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw Error("ValueError: cannot read " + path);
    return std::string(std::istreambuf_iterator<char>(f), {});
  }

 private:
  Module mod_;
  Function set_input_, run_, get_output_;
};

}  // namespace tvmrt

#endif  // TVM_RUNTIME_RS_HPP_
