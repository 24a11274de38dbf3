// Packed functions across the C++ boundary: the shared helpers, the call shim every function
// of the core carries, and the registry.

#include "runtime.h"

using namespace tvm::runtime;
using namespace tvmrt;

// Shared with the other C++ files of this layer (declared in bridge.h).
[[noreturn]] void tvmrt::ThrowLastError() { throw InternalError("libtvm_runtime.so", 0, TVMGetLastError()); }

namespace tvmrt {

void Check(int rc) {
  if (rc != 0) ThrowLastError();
}

// An NDArray handle (DLTensor*) is its object + 16.
Object* ArrayObject(TVMArrayHandle h) { return reinterpret_cast<Object*>(reinterpret_cast<char*>(h) - 16); }

// Drops what a host's return value holds, as upstream's inline TVMRetValue::Clear() does.
void ClearRet(TVMRetValueLayout* rv) {
  switch (rv->type_code_) {
    case kTVMStr:
    case kTVMBytes:
      delete static_cast<std::string*>(rv->value_.v_handle);
      break;
    case kTVMNDArrayHandle:
      DecRef(ArrayObject(static_cast<TVMArrayHandle>(rv->value_.v_handle)));
      break;
    case kTVMPackedFuncHandle:
    case kTVMModuleHandle:
    case kTVMObjectHandle:
      DecRef(static_cast<Object*>(rv->value_.v_handle));
      break;
    default:
      break;
  }
  rv->type_code_ = kTVMNullptr;
  rv->value_.v_handle = nullptr;
}

extern "C" void tvmrt_cxx_call_packed(const Object* obj, TVMArgs args, TVMRetValueLayout* rv);

// A module of this runtime for a host's module (new count); this runtime's own as they are.
Object* NativeModule(Object* module) {
  if (!module || tvmrt_object_is_native(module)) {
    IncRef(module);
    return module;
  }
  TVMModuleHandle h = nullptr;
  Check(tvmrt_module_from_host(module, &h));
  return static_cast<Object*>(h);
}

Object* ToHost(Object* obj);
Object* ToNative(Object* obj);


// A host's own PackedFuncObj (a C++ lambda behind upstream's PackedFuncSubObj) called from C: the
// C callback of a function made with TVMFuncCreateFromCFunc. Its exceptions stop here.
int CallHostFunction(TVMValue* values, int* codes, int num_args, TVMRetValueHandle ret, void* resource) {
  auto* obj = static_cast<Object*>(resource);
  auto call = *reinterpret_cast<void (**)(const Object*, TVMArgs, TVMRetValueLayout*)>(
      reinterpret_cast<char*>(obj) + 16);
  TVMRetValueLayout rv{};
  rv.type_code_ = kTVMNullptr;
  std::vector<TVMValue> args(values, values + num_args);
  std::vector<Object*> converted;
  try {
    // The host reads arrays and maps with upstream's layouts.
    for (int i = 0; i < num_args; ++i) {
      auto* o = static_cast<Object*>(args[i].v_handle);
      bool container = codes[i] == kTVMObjectHandle && o && (o->type_index_ == kArrayIndex || o->type_index_ == kMapIndex);
      if (container || (codes[i] == kTVMModuleHandle && o)) {
        IncRef(o);
        converted.push_back(ToHost(o));
        args[i].v_handle = converted.back();
      }
    }
    call(obj, TVMArgs{args.data(), codes, num_args}, &rv);
    if (rv.type_code_ == kTVMObjectHandle) rv.value_.v_handle = ToNative(static_cast<Object*>(rv.value_.v_handle));
    if (rv.type_code_ == kTVMModuleHandle && rv.value_.v_handle) {
      Object* own = NativeModule(static_cast<Object*>(rv.value_.v_handle));
      DecRef(static_cast<Object*>(rv.value_.v_handle));
      rv.value_.v_handle = own;
    }
  } catch (const std::exception& e) {
    for (Object* o : converted) DecRef(o);
    ClearRet(&rv);
    TVMAPISetLastError(e.what());
    return -1;
  } catch (...) {
    for (Object* o : converted) DecRef(o);
    ClearRet(&rv);
    TVMAPISetLastError("a C++ callback threw an exception that is not a std::exception");
    return -1;
  }
  for (Object* o : converted) DecRef(o);
  int rc = 0;
  switch (rv.type_code_) {
    case kTVMStr:
    case kTVMBytes: {
      auto* s = static_cast<std::string*>(rv.value_.v_handle);
      if (rv.type_code_ == kTVMStr) {
        TVMValue v;
        v.v_str = s->c_str();
        int code = kTVMStr;
        rc = TVMCFuncSetReturn(ret, &v, &code, 1);
      } else {
        TVMByteArray bytes{s->data(), s->size()};
        TVMValue v;
        v.v_handle = &bytes;
        int code = kTVMBytes;
        rc = TVMCFuncSetReturn(ret, &v, &code, 1);
      }
      break;
    }
    case kTVMNullptr:
      break;
    default:
      // TVMCFuncSetReturn takes its own count of objects; the host's rv keeps its own.
      rc = TVMCFuncSetReturn(ret, &rv.value_, &rv.type_code_, 1);
      break;
  }
  ClearRet(&rv);
  return rc;
}

void ReleaseHostFunction(void* resource) { DecRef(static_cast<Object*>(resource)); }

// Whether `obj` is one of this runtime's functions (its call pointer is ours).
bool IsOurs(const Object* obj) {
  auto call = *reinterpret_cast<void* const*>(reinterpret_cast<const char*>(obj) + 16);
  return call == reinterpret_cast<void*>(&tvmrt_cxx_call_packed);
}

// A function handle this runtime can call: its own functions as they are, a host's wrapped as a C
// callback (the wrapper holds a count of the host's object). Returns a new count.
TVMFunctionHandle Adopt(Object* func) {
  if (IsOurs(func)) {
    IncRef(func);
    return func;
  }
  IncRef(func);
  TVMFunctionHandle out = nullptr;
  if (TVMFuncCreateFromCFunc(CallHostFunction, func, ReleaseHostFunction, &out) != 0) {
    DecRef(func);
    ThrowLastError();
  }
  return out;
}

TVMFunctionHandle GlobalFunction(const char* name) {
  TVMFunctionHandle f = nullptr;
  Check(TVMFuncGetGlobal(name, &f));
  if (!f) throw InternalError("libtvm_runtime.so", 0, std::string("no global function ") + name);
  return f;
}

// Calls global `name` on `args` (borrowed), returning the value and its code.
TVMValue CallGlobal(const char* name, std::vector<TVMValue> args, std::vector<int> codes, int* ret_code) {
  TVMFunctionHandle f = GlobalFunction(name);
  TVMValue r;
  int status = TVMFuncCall(f, args.data(), codes.data(), static_cast<int>(args.size()), &r, ret_code);
  TVMFuncFree(f);
  Check(status);
  return r;
}

// A ShapeTuple of this runtime's holding `dims`: a new count.
Object* MakeShapeTuple(const int64_t* dims, size_t n) {
  std::vector<TVMValue> values(n);
  for (size_t i = 0; i < n; ++i) values[i].v_int64 = dims[i];
  int code = 0;
  return static_cast<Object*>(CallGlobal("runtime.ShapeTuple", values, std::vector<int>(n, kDLInt), &code).v_handle);
}

// A String of this runtime's holding `s`.
String MakeString(const char* s) {
  TVMValue v;
  v.v_str = s;
  int code = 0;
  return String(static_cast<Object*>(CallGlobal("runtime.String", {v}, {kTVMStr}, &code).v_handle));
}

// A ShapeTuple of this runtime's with the dims of `shape` (perhaps a host's own, whose cells this
// runtime does not read as its own): a new count.
Object* OwnShapeTuple(const Object* shape) {
  auto base = reinterpret_cast<const char*>(shape);
  const int64_t* dims = *reinterpret_cast<const int64_t* const*>(base + 16);
  uint64_t n = *reinterpret_cast<const uint64_t*>(base + 24);
  return MakeShapeTuple(dims, n);
}

}  // namespace tvmrt

// The call pointer of every function this runtime makes (PackedFuncObj::f_call_packed_, at the
// object's offset 16), as hosts' inline `PackedFunc::operator()` invokes it.
namespace tvmrt {
// Whether argument `i` must be rebuilt before this runtime reads it (see the loop below).
bool NeedsConversion(const TVMValue& v, int code) {
  if (!v.v_handle) return false;
  // A temporary passed by rvalue reference (the address of the host's ObjectRef): read as the
  // object it holds, which may be one of the host's own.
  if (code == kTVMObjectRValueRefArg) return true;
  if (code == kTVMObjectHandle) {
    return static_cast<Object*>(v.v_handle)->type_index_ == kStringIndex || !tvmrt_object_is_native(v.v_handle);
  }
  if (code == kTVMModuleHandle) return !tvmrt_object_is_native(v.v_handle);
  if (code == kTVMPackedFuncHandle) return !IsOurs(static_cast<Object*>(v.v_handle));
  return false;
}

// Stores the outcome of a call (value and code from the C API) into a host's return value.
void SetRet(TVMRetValueLayout* rv, TVMValue ret, int code) {
  ClearRet(rv);
  switch (code) {
    case kTVMStr:
      rv->value_.v_handle = new std::string(ret.v_str);
      break;
    case kTVMBytes: {
      auto* bytes = static_cast<TVMByteArray*>(ret.v_handle);
      rv->value_.v_handle = new std::string(bytes->data, bytes->size);
      break;
    }
    case kTVMObjectHandle:
    case kTVMModuleHandle:
      // Arrays and maps reach the host with upstream's layouts, which its inline code reads, and
      // its own modules as themselves.
      rv->value_.v_handle = ToHost(static_cast<Object*>(ret.v_handle));
      break;
    default:
      rv->value_ = ret;
      break;
  }
  rv->type_code_ = code;
}
}  // namespace tvmrt

extern "C" TVMRT_EXPORT void tvmrt_cxx_call_packed(const Object* obj, TVMArgs args, TVMRetValueLayout* rv) {
  bool plain = true;
  for (int i = 0; i < args.num_args && plain; ++i) plain = !NeedsConversion(args.values[i], args.type_codes[i]);
  TVMValue ret;
  int code = kTVMNullptr;
  if (plain) {
    // The common case (numbers, tensors, C strings, this runtime's objects): no copy of the arguments.
    Check(TVMFuncCall(const_cast<Object*>(obj), const_cast<TVMValue*>(args.values), const_cast<int*>(args.type_codes),
                      args.num_args, &ret, &code));
    SetRet(rv, ret, code);
    return;
  }
  std::vector<TVMValue> values(args.values, args.values + args.num_args);
  std::vector<int> codes(args.type_codes, args.type_codes + args.num_args);
  std::deque<std::string> strings;  // the characters stay where values point
  std::deque<TVMByteArray> byte_arrays;
  // Counts of what was made for the call (converted objects, wrapped functions), dropped after it.
  struct Held {
    std::vector<Object*> objects;
    ~Held() {
      for (auto o : objects) DecRef(o);
    }
  } held;
  for (int i = 0; i < args.num_args; ++i) {
    if (codes[i] == kTVMObjectRValueRefArg) {
      Object* referred = values[i].v_handle ? *static_cast<Object**>(values[i].v_handle) : nullptr;
      values[i].v_handle = referred;
      codes[i] = referred ? kTVMObjectHandle : kTVMNullptr;
    }
    if (codes[i] == kTVMObjectHandle && values[i].v_handle &&
        static_cast<Object*>(values[i].v_handle)->type_index_ == kStringIndex) {
      // A String object (perhaps the host's own): passed on as its characters, as bytes when
      // they hold a NUL (binary blobs travel as Strings: opencl.SetPreCompiledPrograms).
      strings.push_back(StringOf(static_cast<Object*>(values[i].v_handle)));
      const std::string& chars = strings.back();
      if (chars.find('\0') == std::string::npos) {
        values[i].v_str = chars.c_str();
        codes[i] = kTVMStr;
      } else {
        byte_arrays.push_back(TVMByteArray{chars.data(), chars.size()});
        values[i].v_handle = &byte_arrays.back();
        codes[i] = kTVMBytes;
      }
    } else if (codes[i] == kTVMObjectHandle && values[i].v_handle &&
               !tvmrt_object_is_native(values[i].v_handle)) {
      // A host's shape tuple, array or map: passed on rebuilt as this runtime's own.
      Object* given = static_cast<Object*>(values[i].v_handle);
      IncRef(given);
      held.objects.push_back(ToNative(given));
      values[i].v_handle = held.objects.back();
    } else if (codes[i] == kTVMModuleHandle && values[i].v_handle && !tvmrt_object_is_native(values[i].v_handle)) {
      // A module the host defined: passed on as one of this runtime's that calls it back.
      held.objects.push_back(NativeModule(static_cast<Object*>(values[i].v_handle)));
      values[i].v_handle = held.objects.back();
    } else if (codes[i] == kTVMPackedFuncHandle && values[i].v_handle) {
      held.objects.push_back(static_cast<Object*>(Adopt(static_cast<Object*>(values[i].v_handle))));
      values[i].v_handle = held.objects.back();
    }
  }
  Check(TVMFuncCall(const_cast<Object*>(obj), values.data(), codes.data(), args.num_args, &ret, &code));
  SetRet(rv, ret, code);
}

// ---------------------------------------------------------------------------------------------
// Modules.

// ---------------------------------------------------------------------------------------------
// The registry. Get hands out pointers that stay valid for the life of the process.

namespace {
std::mutex registry_mutex;
std::unordered_map<std::string, PackedFunc*>& GetCache() {
  static auto* cache = new std::unordered_map<std::string, PackedFunc*>();
  return *cache;
}
}  // namespace

const PackedFunc* Registry::Get(const String& name) {
  std::string key = name.str();
  TVMFunctionHandle f = nullptr;
  Check(TVMFuncGetGlobal(key.c_str(), &f));
  if (!f) return nullptr;
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto& slot = GetCache()[key];
  if (slot && slot->get() == f) {
    DecRef(static_cast<Object*>(f));
    return slot;
  }
  // A new or re-registered function: the old pointer stays valid (leaked), as upstream's do.
  slot = new PackedFunc(static_cast<Object*>(f));
  return slot;
}

Registry& Registry::Register(const String& name, bool can_override) {
  std::string key = name.str();
  if (!can_override) {
    TVMFunctionHandle existing = nullptr;
    Check(TVMFuncGetGlobal(key.c_str(), &existing));
    if (existing) {
      TVMFuncFree(existing);
      throw InternalError("libtvm_runtime.so", 0, "ValueError: Global PackedFunc " + key + " is already registered");
    }
  }
  // Entries live for the process, as upstream's do.
  auto* r = new Registry();
  IncRef(name.get());
  r->name_ = String(name.get());
  std::lock_guard<std::mutex> lock(registry_mutex);
  static auto* entries = new std::vector<Registry*>();
  entries->push_back(r);
  return *r;
}

Registry& Registry::set_body(PackedFunc f) {
  TVMFunctionHandle h = Adopt(f.get());
  int rc = TVMFuncRegisterGlobal(name_.str().c_str(), h, 1);
  TVMFuncFree(h);
  Check(rc);
  func_ = f;
  return *this;
}

bool Registry::Remove(const String& name) {
  std::string key = name.str();
  TVMFunctionHandle f = nullptr;
  Check(TVMFuncGetGlobal(key.c_str(), &f));
  if (!f) return false;
  TVMFuncFree(f);
  Check(TVMFuncRemoveGlobal(key.c_str()));
  return true;
}

std::vector<String> Registry::ListNames() {
  int n = 0;
  const char** names = nullptr;
  Check(TVMFuncListGlobalNames(&n, &names));
  // Copied first: the names live in thread-local storage that the calls below reuse.
  std::vector<std::string> copies(names, names + n);
  std::vector<String> out;
  for (const auto& s : copies) out.push_back(MakeString(s.c_str()));
  return out;
}
