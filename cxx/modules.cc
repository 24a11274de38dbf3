// Modules: the C++ face of the core's modules, host modules the core holds, the imports mirror.

#include "runtime.h"

using namespace tvm::runtime;
using namespace tvmrt;

// ---------------------------------------------------------------------------------------------
// Modules.

Module Module::LoadFromFile(const String& file_name, const String& format) {
  TVMModuleHandle h = nullptr;
  Check(TVMModLoadFromFile(file_name.str().c_str(), format.str().c_str(), &h));
  return Module(static_cast<Object*>(h));
}

namespace {

// Calls global `name` with one module argument (and maybe a string and an int); returns the value.
TVMValue CallOnModule(const char* name, Object* module, int* ret_code, const char* str = nullptr, int flag = -1) {
  TVMValue v[3];
  v[0].v_handle = module;
  v[1].v_str = str;
  v[2].v_int64 = flag;
  size_t n = str ? (flag >= 0 ? 3 : 2) : 1;
  std::vector<int> codes = {kTVMModuleHandle, kTVMStr, kDLInt};
  codes.resize(n);
  return CallGlobal(name, std::vector<TVMValue>(v, v + n), codes, ret_code);
}

// The modules of this library, as C++ hosts see them: every virtual goes back through the C API.
class RustModule final : public ModuleNode {
 public:
  const char* type_key() const override {
    // Upstream returns a string that lives for the process; intern ours.
    static std::mutex m;
    static auto* keys = new std::unordered_map<std::string, std::unique_ptr<std::string>>();
    int code = 0;
    TVMValue r = CallOnModule("runtime.ModuleGetTypeKey", const_cast<RustModule*>(this), &code);
    std::string key = r.v_str;
    std::lock_guard<std::mutex> lock(m);
    auto& slot = (*keys)[key];
    if (!slot) slot = std::make_unique<std::string>(key);
    return slot->c_str();
  }
  PackedFunc GetFunction(const String& name, const ObjectPtr<Object>&) override {
    TVMFunctionHandle f = nullptr;
    Check(TVMModGetFunction(static_cast<Object*>(this), name.str().c_str(), 0, &f));
    return PackedFunc(static_cast<Object*>(f));
  }
  int GetPropertyMask() const override {
    int code = 0;
    return static_cast<int>(CallOnModule("runtime.ModuleGetPropertyMask", const_cast<RustModule*>(this), &code).v_int64);
  }
  // The core answers these for its modules (runtime.ModuleGetSource and friends), so a host's
  // virtual call reaches what TVM's Python reaches.
  void SaveToFile(const String& file_name, const String& format) override {
    TVMValue v[3];
    v[0].v_handle = static_cast<Object*>(this);
    std::string name = file_name.str(), fmt = format.str();
    v[1].v_str = name.c_str();
    v[2].v_str = fmt.c_str();
    int code = 0;
    CallGlobal("runtime.ModuleSaveToFile", {v[0], v[1], v[2]}, {kTVMModuleHandle, kTVMStr, kTVMStr}, &code);
  }
  String GetSource(const String& format) override {
    int code = 0;
    std::string fmt = format.str();
    return MakeString(CallOnModule("runtime.ModuleGetSource", this, &code, fmt.c_str()).v_str);
  }
  String GetFormat() override {
    int code = 0;
    return MakeString(CallOnModule("runtime.ModuleGetFormat", this, &code).v_str);
  }
  bool ImplementsFunction(const String& name, bool query_imports) override {
    int code = 0;
    std::string n = name.str();
    return CallOnModule("runtime.ModuleImplementsFunction", this, &code, n.c_str(), query_imports ? 1 : 0).v_int64 != 0;
  }
};

const void* RustModuleVptr() {
  // The vtable pointer a RustModule carries; only read, the object is never used.
  static const void* vptr = [] {
    alignas(RustModule) static unsigned char storage[sizeof(RustModule)];
    auto* m = new (storage) RustModule();
    const void* p = *reinterpret_cast<const void* const*>(m);
    m->~RustModule();
    return p;
  }();
  return vptr;
}

bool IsRustModule(const ModuleNode* node) { return *reinterpret_cast<const void* const*>(node) == RustModuleVptr(); }

}  // namespace

extern "C" TVMRT_EXPORT const void* tvmrt_cxx_module_vptr(void) { return RustModuleVptr(); }

void ModuleNode::SaveToFile(const String&, const String&) {
  throw InternalError("libtvm_runtime.so", 0, std::string("Module[") + type_key() + "] does not support SaveToFile");
}

void ModuleNode::SaveToBinary(dmlc::Stream*) {
  throw InternalError("libtvm_runtime.so", 0, std::string("Module[") + type_key() + "] does not support SaveToBinary");
}

String ModuleNode::GetSource(const String&) {
  throw InternalError("libtvm_runtime.so", 0, std::string("Module[") + type_key() + "] does not support GetSource");
}

String ModuleNode::GetFormat() {
  throw InternalError("libtvm_runtime.so", 0, std::string("Module[") + type_key() + "] does not support GetFormat");
}

bool ModuleNode::ImplementsFunction(const String& name, bool query_imports) {
  return GetFunction(name, query_imports).get() != nullptr;
}

PackedFunc ModuleNode::GetFunction(const String& name, bool query_imports) {
  if (IsRustModule(this)) {
    TVMFunctionHandle f = nullptr;
    Check(TVMModGetFunction(static_cast<Object*>(this), name.str().c_str(), query_imports ? 1 : 0, &f));
    return PackedFunc(static_cast<Object*>(f));
  }
  // A host's module: its own GetFunction, then (when asked) its imports, depth first.
  Object* self = static_cast<Object*>(this);
  IncRef(self);
  PackedFunc pf = GetFunction(name, ObjectPtr<Object>(self));
  if (pf.get() || !query_imports) return pf;
  for (const Module& m : imports_) {
    auto* node = static_cast<ModuleNode*>(m.get());
    PackedFunc f = node->GetFunction(name, true);
    if (f.get()) return f;
  }
  return PackedFunc();
}

const PackedFunc* ModuleNode::GetFuncFromEnv(const String& name) {
  // The function found, kept for the life of the process (upstream keeps it for the module's);
  // looked up again only when the name resolves to another function.
  PackedFunc found;
  if (IsRustModule(this)) {
    // The imports, depth first.
    int code = 0;
    int64_t n = CallOnModule("runtime.ModuleImportsSize", static_cast<Object*>(this), &code).v_int64;
    for (int64_t i = 0; i < n && !found.get(); ++i) {
      TVMValue a[2];
      a[0].v_handle = static_cast<Object*>(this);
      a[1].v_int64 = i;
      Module import(static_cast<Object*>(CallGlobal("runtime.ModuleGetImport", {a[0], a[1]}, {kTVMModuleHandle, kDLInt}, &code).v_handle));
      TVMFunctionHandle f = nullptr;
      Check(TVMModGetFunction(import.get(), name.str().c_str(), 1, &f));
      found = PackedFunc(static_cast<Object*>(f));
    }
  } else {
    found = GetFunction(name, true);
  }
  if (!found.get()) {
    // Then the registry.
    const PackedFunc* global = Registry::Get(name);
    if (!global) {
      throw InternalError("libtvm_runtime.so", 0,
                          "Cannot find function " + name.str() + " in the imported modules or global registry");
    }
    return global;
  }
  static std::mutex m;
  static auto* kept = new std::unordered_map<Object*, PackedFunc*>();
  std::lock_guard<std::mutex> lock(m);
  auto& slot = (*kept)[found.get()];
  if (!slot) slot = new PackedFunc(found);
  return slot;
}

void ModuleNode::Import(Module other) {
  if (IsRustModule(this)) {
    // A host's module joins as one of this runtime's that calls it back.
    ObjectRef own(NativeModule(other.get()));
    Check(TVMModImport(static_cast<Object*>(this), own.get()));
    return;
  }
  imports_.push_back(other);
}
// ---------------------------------------------------------------------------------------------
// Host modules held by the core (src/cxx/host_module.rs): their virtuals, behind the exception edge.

extern "C" TVMRT_EXPORT int tvmrt_cxx_host_module_get_function(void* host, const char* name, TVMFunctionHandle* out) {
  auto* obj = static_cast<Object*>(host);
  try {
    auto* node = static_cast<ModuleNode*>(obj);
    String key = MakeString(name);
    IncRef(obj);
    PackedFunc pf = node->GetFunction(key, ObjectPtr<Object>(obj));
    *out = pf.get() ? Adopt(pf.get()) : nullptr;
    return 0;
  } catch (const std::exception& e) {
    TVMAPISetLastError(e.what());
    return -1;
  } catch (...) {
    TVMAPISetLastError("a host module's GetFunction threw an exception that is not a std::exception");
    return -1;
  }
}

extern "C" TVMRT_EXPORT void* tvmrt_cxx_native_module(void* host) {
  try {
    return NativeModule(static_cast<Object*>(host));
  } catch (const std::exception& e) {
    TVMAPISetLastError(e.what());
    return nullptr;
  }
}

extern "C" TVMRT_EXPORT const char* tvmrt_cxx_host_module_type_key(void* host) {
  auto* obj = static_cast<Object*>(host);
  try {
    return static_cast<ModuleNode*>(obj)->type_key();
  } catch (...) {
    return nullptr;
  }
}

// ---------------------------------------------------------------------------------------------
// The imports_ mirror of the core's modules (src/cxx/imports.rs).

extern "C" TVMRT_EXPORT void tvmrt_cxx_set_imports(void* vector, void* const* handles, size_t n) {
  auto* const* modules = reinterpret_cast<Object* const*>(handles);
  auto* imports = static_cast<std::vector<Module>*>(vector);
  std::vector<Module> fresh;
  fresh.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    IncRef(modules[i]);
    fresh.emplace_back(ToHost(modules[i]));
  }
  imports->swap(fresh);
}

extern "C" TVMRT_EXPORT void tvmrt_cxx_drop_imports(void* vector) {
  static_cast<std::vector<Module>*>(vector)->~vector();
}

// ---------------------------------------------------------------------------------------------
// What the core asks of host modules beyond their functions (src/cxx/host_module.rs): their
// source, format and files, and imports added on the core's side, behind the exception edge.

namespace tvm {
namespace runtime {
struct HostImports {
  static std::vector<Module>& Of(Object* host) { return static_cast<ModuleNode*>(host)->imports_; }
};
}  // namespace runtime
}  // namespace tvm

namespace {

// Runs `body`, turning a C++ exception into the C API's -1 and last error.
template <typename F>
int Guarded(const char* what, F body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    TVMAPISetLastError(e.what());
  } catch (...) {
    TVMAPISetLastError((std::string("a host module's ") + what + " threw an exception that is not a std::exception").c_str());
  }
  return -1;
}

// A copy the core frees with free().
char* CopyOut(const String& s) {
  std::string text = s.str();
  char* out = static_cast<char*>(std::malloc(text.size() + 1));
  if (!out) throw std::bad_alloc();
  std::memcpy(out, text.c_str(), text.size() + 1);
  return out;
}

}  // namespace

// what: 0 the source in `format`, 1 the format.
extern "C" TVMRT_EXPORT int tvmrt_cxx_host_module_text(void* host, int what, const char* format, char** out) {
  auto* node = static_cast<ModuleNode*>(static_cast<Object*>(host));
  return Guarded(what == 0 ? "GetSource" : "GetFormat", [&] {
    *out = CopyOut(what == 0 ? node->GetSource(MakeString(format)) : node->GetFormat());
  });
}

extern "C" TVMRT_EXPORT int tvmrt_cxx_host_module_save(void* host, const char* file_name, const char* format) {
  auto* node = static_cast<ModuleNode*>(static_cast<Object*>(host));
  return Guarded("SaveToFile", [&] { node->SaveToFile(MakeString(file_name), MakeString(format)); });
}

// Appends the core's module `dep` (borrowed) to the host module's imports_, where the host's own
// code (GetFunction(name, true), GetFuncFromEnv, its own walks) finds it.
extern "C" TVMRT_EXPORT int tvmrt_cxx_host_module_import(void* host, void* dep) {
  auto* node = static_cast<ModuleNode*>(static_cast<Object*>(host));
  return Guarded("Import", [&] {
    auto* obj = static_cast<Object*>(dep);
    IncRef(obj);
    node->Import(Module(ToHost(obj)));
  });
}

extern "C" TVMRT_EXPORT size_t tvmrt_cxx_host_module_imports(void* host, void** out, size_t cap) {
  const std::vector<Module>& imports = HostImports::Of(static_cast<Object*>(host));
  size_t n = 0;
  try {
    for (; n < cap && n < imports.size(); ++n) out[n] = NativeModule(imports[n].get());
  } catch (...) {
    for (size_t i = 0; i < n; ++i) DecRef(static_cast<Object*>(out[i]));
    return 0;
  }
  return cap == 0 ? imports.size() : n;
}

extern "C" TVMRT_EXPORT void tvmrt_cxx_host_module_clear_imports(void* host) {
  HostImports::Of(static_cast<Object*>(host)).clear();
}

// ---------------------------------------------------------------------------------------------
// A module blob's reader as the dmlc::Stream upstream's loaders take (library/plugin.rs): every
// Read is the core's, so what a loader consumes is what the next blob entry starts after.

namespace {

class CoreReadStream final : public dmlc::Stream {
 public:
  CoreReadStream(size_t (*read)(void*, void*, size_t), void* ctx) : read_(read), ctx_(ctx) {}
  size_t Read(void* ptr, size_t size) override { return read_(ctx_, ptr, size); }
  void Write(const void*, size_t) override {
    throw InternalError("libtvm_runtime.so", 0, "a module blob is read-only: a loader cannot write to it");
  }

 private:
  size_t (*read_)(void*, void*, size_t);
  void* ctx_;
};

}  // namespace

extern "C" TVMRT_EXPORT void* tvmrt_cxx_read_stream_new(size_t (*read)(void*, void*, size_t), void* ctx) {
  try {
    return static_cast<dmlc::Stream*>(new CoreReadStream(read, ctx));
  } catch (...) {
    return nullptr;
  }
}

extern "C" TVMRT_EXPORT void tvmrt_cxx_read_stream_free(void* stream) { delete static_cast<dmlc::Stream*>(stream); }
