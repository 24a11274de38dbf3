// A module of this runtime as tvm-ffi's `ffi.Module` (type index 73), for hosts that run on
// upstream's `libtvm_ffi.so` (TVM 0.22 and later: its loader, its Python, C++ hosts built against
// its headers). libtvm_ffi and those hosts reach a module's functions through virtual calls, so
// the object must have that class's shape: a vtable pointer, then the 24-byte object header (the
// handle points there), then `imports_` (an `Array<Any>`) and `import_lookup_cache_` (a `Map`),
// which libtvm_ffi's own code reads and appends to. The layout, the order of the twelve virtual
// functions and the way each passes its values are the same in every apache-tvm-ffi 0.1.x; no
// symbol of libtvm_ffi is linked. Every function forwards to the Rust core
// (src/tvm_ffi/module.rs), which owns what the module is.

#include <stddef.h>
#include <stdint.h>

#include <stdexcept>
#include <string>

#include "bridge.h"

namespace {

// tvm-ffi's object header and value cell (`TVMFFIObject`, `TVMFFIAny` in its C ABI).
struct Header {
  uint64_t combined_ref_count;
  int32_t type_index;
  uint32_t padding;
  void (*deleter)(void* self, int flags);
};
struct Cell {
  int32_t type_index;
  uint32_t small_len;
  uint64_t value;
};

// The values these virtual functions return (`Optional<Function>`, `Array<String>`, `String`,
// `Bytes`, `Optional<String>`) are classes with destructors, so C++ returns them through a hidden
// pointer; these have their layouts (an object pointer; a value cell) and, having destructors of
// their own, are returned the same way. The caller destroys what we return, never us.
struct ObjectCell {
  void* object;
  ~ObjectCell() {}
};
struct ValueCell {
  Cell cell;
  ~ValueCell() {}
};

constexpr int32_t kModuleTypeIndex = 73;
constexpr int32_t kSmallStr = 11;
constexpr int32_t kStr = 65;
constexpr uint64_t kStrongAndWeakOne = (uint64_t{1} << 32) | 1;
constexpr int kDeleteStrong = 1;
constexpr int kDeleteWeak = 2;

// A `String` argument's bytes: a small string inline in the cell, or a string object whose
// `TVMFFIByteArray` follows its header.
std::string Text(const Cell& s) {
  if (s.type_index == kSmallStr) {
    return std::string(reinterpret_cast<const char*>(&s.value), s.small_len <= 7 ? s.small_len : 7);
  }
  if (s.type_index == kStr && s.value != 0) {
    const char* obj = reinterpret_cast<const char*>(s.value);
    const char* data = *reinterpret_cast<const char* const*>(obj + sizeof(Header));
    size_t size = *reinterpret_cast<const size_t*>(obj + sizeof(Header) + sizeof(void*));
    return std::string(data, size);
  }
  return std::string();
}

[[noreturn]] void ThrowLastError() { throw std::runtime_error(TVMGetLastError()); }

class FfiModule final {
 public:
  FfiModule(void* module, const char* kind, void* imports, void* lookup_cache)
      : header_{kStrongAndWeakOne, kModuleTypeIndex, 0, &Delete},
        imports_(imports),
        lookup_cache_(lookup_cache),
        module_(module),
        kind_(kind) {}

  // tvm::ffi::ModuleObj's virtual functions, in its order.
  virtual const char* kind() const { return kind_.c_str(); }
  virtual int GetPropertyMask() const { return tvmrt_ffi_module_property_mask(module_); }
  virtual ObjectCell GetFunction(const Cell& name) {
    std::string n = Text(name);
    void* f = nullptr;
    if (tvmrt_ffi_module_get_function(module_, Handle(), n.data(), n.size(), &f) != 0) ThrowLastError();
    return ObjectCell{f};
  }
  virtual bool ImplementsFunction(const Cell& name) {
    std::string n = Text(name);
    int found = 0;
    if (tvmrt_ffi_module_implements(module_, Handle(), n.data(), n.size(), &found) != 0) ThrowLastError();
    return found != 0;
  }
  virtual ValueCell GetFunctionDoc(const Cell&) { return ValueCell{Cell{0, 0, 0}}; }
  virtual ValueCell GetFunctionMetadata(const Cell&) { return ValueCell{Cell{0, 0, 0}}; }
  virtual void WriteToFile(const Cell&, const Cell&) const { Unsupported("WriteToFile"); }
  virtual ObjectCell GetWriteFormats() const {
    void* empty = nullptr;
    if (tvmrt_ffi_empty_array(&empty) != 0) ThrowLastError();
    return ObjectCell{empty};
  }
  virtual ValueCell SaveToBytes() const { Unsupported("SaveToBytes"); }
  virtual ValueCell InspectSource(const Cell&) const { return ValueCell{Cell{kSmallStr, 0, 0}}; }
  virtual void ImportModule(const ObjectCell& other) {
    if (tvmrt_ffi_module_import(module_, Handle(), other.object) != 0) ThrowLastError();
  }
  virtual void ClearImports() {
    if (tvmrt_ffi_module_clear_imports(module_, Handle()) != 0) ThrowLastError();
  }

  void* Handle() { return &header_; }
  void** ImportsSlot() { return &imports_; }
  void* Module() const { return module_; }

  static FfiModule* FromHandle(void* handle) {
    return reinterpret_cast<FfiModule*>(static_cast<char*>(handle) - HeaderOffset());
  }

  // Where the header sits (after the vtable pointer); checked against a real object once.
  static constexpr size_t HeaderOffset() { return sizeof(void*); }

  // Whether a module object (type index 73) is one of ours: its vtable is this class's.
  static bool IsOurs(void* handle) {
    static const FfiModule probe(nullptr, "", nullptr, nullptr);
    return *reinterpret_cast<void* const*>(FromHandle(handle)) == *reinterpret_cast<void* const*>(&probe);
  }

 private:
  [[noreturn]] void Unsupported(const char* what) const {
    throw std::runtime_error("Module[" + kind_ + "] does not support " + what);
  }

  // tvm-ffi's deleter protocol: the strong bit ends what the object holds, the weak bit frees it.
  static void Delete(void* handle, int flags) {
    FfiModule* self = FromHandle(handle);
    if (flags & kDeleteStrong) {
      tvmrt_ffi_module_release(self->module_, self->imports_, self->lookup_cache_);
      self->module_ = self->imports_ = self->lookup_cache_ = nullptr;
    }
    if (flags & kDeleteWeak) delete self;
  }

  Header header_;
  void* imports_;
  void* lookup_cache_;
  void* module_;
  std::string kind_;
};

}  // namespace

extern "C" void* tvmrt_ffi_module_new(void* module, const char* kind, void* imports, void* lookup_cache) {
  FfiModule* m = new FfiModule(module, kind, imports, lookup_cache);
  if (reinterpret_cast<char*>(m->Handle()) - reinterpret_cast<char*>(m) !=
      static_cast<ptrdiff_t>(FfiModule::HeaderOffset())) {
    std::terminate();  // a compiler that lays the class out otherwise cannot build this runtime
  }
  return m->Handle();
}

extern "C" void* tvmrt_ffi_module_core(void* handle) {
  if (handle == nullptr || reinterpret_cast<Header*>(handle)->type_index != kModuleTypeIndex) return nullptr;
  return FfiModule::IsOurs(handle) ? FfiModule::FromHandle(handle)->Module() : nullptr;
}

extern "C" void** tvmrt_ffi_module_imports_slot(void* handle) {
  return FfiModule::FromHandle(handle)->ImportsSlot();
}
