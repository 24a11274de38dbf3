// The C++ face of libtvm_runtime.so: the out-of-line entry points that programs written against
// TVM 0.16's C++ headers (tvm/runtime/module.h, packed_func.h, registry.h, ndarray.h, logging.h)
// link to, and the call shim that makes this runtime's functions callable by those headers' inline
// code. Everything here goes through the C API of the Rust core; nothing here knows its internals.
// The files, by area: objects.cc (the object protocol), packed.cc (shared helpers, the call shim,
// the registry), containers.cc, modules.cc (with host modules and the imports mirror), ndarray.cc,
// logging.cc (with the odds and ends the headers reach), threading.cc.
//
// The classes below are this layer's own minimal declarations of upstream's, written from the ABI
// facts (names for the mangling, sizes and field offsets where inline host code reads them): an
// ObjectRef is one pointer with non-trivial copy and destruction (so it is passed by invisible
// reference and returned through a hidden pointer), an object starts with upstream's 16-byte header,
// a ModuleNode handed to a host is the object address minus 8 (upstream's vtable pointer comes
// first), a TVMArgs travels by value in memory.
//
// C++ exceptions never reach Rust: every Rust -> C++ call (a host's PackedFunc) is wrapped in
// try/catch and becomes a C status, and every C error becomes a thrown tvm::runtime::InternalError.

#ifndef TVMRT_CXX_RUNTIME_H_
#define TVMRT_CXX_RUNTIME_H_

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <ctime>
#include <iomanip>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "bridge.h"
#include "tvm_runtime.h"

#define TVMRT_EXPORT __attribute__((visibility("default")))

namespace dmlc {
struct Error : public std::runtime_error {
  explicit Error(const std::string& s) : std::runtime_error(s) {}
};
}  // namespace dmlc

namespace tvm {
namespace runtime {

TVMRT_EXPORT std::string Backtrace();

class Error : public ::dmlc::Error {
 public:
  explicit Error(const std::string& s) : ::dmlc::Error(s) {}
};

// Upstream's InternalError, member for member: hosts read these fields through inline accessors.
class InternalError : public Error {
 public:
  InternalError(std::string file, int lineno, std::string message, std::time_t time = std::time(nullptr),
                std::string backtrace = Backtrace())
      : Error(""), file_(file), lineno_(lineno), message_(message), time_(time), backtrace_(backtrace) {
    std::ostringstream s;
    std::tm local{};
    localtime_r(&time, &local);
    s << "[" << std::put_time(&local, "%H:%M:%S") << "] " << file << ":" << lineno << ": " << message << std::endl;
    if (!backtrace.empty()) s << backtrace << std::endl;
    full_message_ = s.str();
  }
  const char* what() const noexcept override { return full_message_.c_str(); }
  // Upstream's accessors (a host compiled against its headers reads these fields inline).
  const std::string& file() const { return file_; }
  int lineno() const { return lineno_; }
  const std::string& message() const { return message_; }
  std::time_t time() const { return time_; }
  const std::string& backtrace() const { return backtrace_; }

 private:
  std::string file_;
  int lineno_;
  std::string message_;
  std::time_t time_;
  std::string backtrace_;
  std::string full_message_;
};

// ---------------------------------------------------------------------------------------------
// Objects and references (upstream's layout).

struct Object {
  uint32_t type_index_;
  std::atomic<int32_t> ref_counter_;
  void (*deleter_)(Object*);

  TVMRT_EXPORT static uint32_t TypeKey2Index(const std::string& key);
  TVMRT_EXPORT static std::string TypeIndex2Key(uint32_t tindex);
  TVMRT_EXPORT static size_t TypeIndex2KeyHash(uint32_t tindex);
  TVMRT_EXPORT static uint32_t GetOrAllocRuntimeTypeIndex(const std::string& key, uint32_t static_tindex,
                                                          uint32_t parent_tindex, uint32_t num_child_slots,
                                                          bool child_slots_can_overflow);
  TVMRT_EXPORT bool DerivedFrom(uint32_t parent_tindex) const;
};
static_assert(sizeof(Object) == 16, "upstream's object header is 16 bytes");

inline void IncRef(Object* o) {
  if (o) o->ref_counter_.fetch_add(1, std::memory_order_relaxed);
}

inline void DecRef(Object* o) {
  if (o && o->ref_counter_.fetch_sub(1, std::memory_order_release) == 1) {
    std::atomic_thread_fence(std::memory_order_acquire);
    if (o->deleter_) o->deleter_(o);
  }
}

class ObjectRef {
 public:
  ObjectRef() = default;
  // Takes over one count of `adopt`.
  explicit ObjectRef(Object* adopt) : data_(adopt) {}
  ObjectRef(const ObjectRef& other) : data_(other.data_) { IncRef(data_); }
  ObjectRef(ObjectRef&& other) noexcept : data_(other.data_) { other.data_ = nullptr; }
  ObjectRef& operator=(ObjectRef other) noexcept {
    std::swap(data_, other.data_);
    return *this;
  }
  ~ObjectRef() { DecRef(data_); }
  Object* get() const { return data_; }

 protected:
  Object* data_ = nullptr;
};
static_assert(sizeof(ObjectRef) == 8, "an ObjectRef is one pointer");

// The characters of a StringObj: the header, then `const char* data` and `uint64_t size`.
inline std::string StringOf(const Object* obj) {
  if (!obj) return std::string();
  auto base = reinterpret_cast<const char*>(obj);
  const char* chars = *reinterpret_cast<const char* const*>(base + 16);
  uint64_t size = *reinterpret_cast<const uint64_t*>(base + 24);
  return std::string(chars, size);
}

class String : public ObjectRef {
 public:
  using ObjectRef::ObjectRef;
  std::string str() const { return StringOf(data_); }
};

class ShapeTuple : public ObjectRef {
 public:
  using ObjectRef::ObjectRef;
  // A ShapeTupleObj: the header, then `const int64_t* data` and `uint64_t size`.
  const int64_t* data() const { return *reinterpret_cast<const int64_t* const*>(reinterpret_cast<const char*>(data_) + 16); }
  uint64_t size() const { return *reinterpret_cast<const uint64_t*>(reinterpret_cast<const char*>(data_) + 24); }
};

template <typename T>
class Optional : public ObjectRef {
 public:
  using ObjectRef::ObjectRef;
};

class PackedFunc : public ObjectRef {
 public:
  using ObjectRef::ObjectRef;
};

class TVMArgs {
 public:
  const TVMValue* values;
  const int* type_codes;
  int num_args;
};

// Upstream's TVMRetValue: a value and its type code. Its inline Clear() deletes a std::string for
// strings and bytes, and drops a count for objects (an NDArray handle is the object + 16).
struct TVMRetValueLayout {
  TVMValue value_;
  int type_code_;
};

// Upstream's DataType: a DLDataType, trivially copied (returned in a register).
class DataType {
 public:
  DLDataType data_;
};

class NDArray : public ObjectRef {
 public:
  using ObjectRef::ObjectRef;
  TVMRT_EXPORT NDArray CopyTo(const DLDevice& dev, Optional<String> mem_scope) const;
  TVMRT_EXPORT tvm::runtime::DataType DataType() const;
  TVMRT_EXPORT static NDArray FromExternalDLTensor(const DLTensor& dl_tensor);
  TVMRT_EXPORT static NDArray NewFromDLTensor(DLTensor* dl_tensor, const DLDevice& dev);
  TVMRT_EXPORT static bool IsAligned(const DLTensor& tensor);
  TVMRT_EXPORT static bool AbilityOfZeroCopyForDLTensor(DLTensor* tensor, const DLDevice& dev);
  TVMRT_EXPORT static NDArray Empty(ShapeTuple shape, DLDataType dtype, DLDevice dev, Optional<String> mem_scope);
  TVMRT_EXPORT static void CopyFromTo(const DLTensor* from, DLTensor* to, void* stream);
  TVMRT_EXPORT static NDArray FromDLPack(DLManagedTensor* tensor);
  TVMRT_EXPORT void CopyFromBytes(const void* data, size_t nbytes);
  TVMRT_EXPORT void CopyToBytes(void* data, size_t nbytes) const;
  TVMRT_EXPORT ShapeTuple Shape() const;
  TVMRT_EXPORT NDArray CreateView(ShapeTuple shape, DLDataType dtype);
  TVMRT_EXPORT DLManagedTensor* ToDLPack() const;
  DLTensor* tensor() const { return reinterpret_cast<DLTensor*>(reinterpret_cast<char*>(data_) + 16); }
};

class Module : public ObjectRef {
 public:
  using ObjectRef::ObjectRef;
  TVMRT_EXPORT static Module LoadFromFile(const String& file_name, const String& format);
};

template <typename T>
class ObjectPtr {
 public:
  explicit ObjectPtr(T* adopt) : data_(adopt) {}
  ObjectPtr(const ObjectPtr& other) : data_(other.data_) { IncRef(data_); }
  ~ObjectPtr() { DecRef(data_); }
  T* get() const { return data_; }

 private:
  T* data_;
};

}  // namespace runtime
}  // namespace tvm

namespace dmlc {
// Upstream's dmlc::Stream, virtual for virtual: module loaders (`runtime.module.loadbinary_<key>`)
// read through Read, and a module's SaveToBinary writes through Write.
class Stream {
 public:
  virtual size_t Read(void* ptr, size_t size) = 0;
  virtual void Write(const void* ptr, size_t size) = 0;
  virtual ~Stream() {}
};
}  // namespace dmlc

namespace tvm {
namespace runtime {

// Upstream's ModuleNode, virtual for virtual and member for member: a vtable pointer, the object
// header at +8, then imports_, an import cache and a mutex. Host subclasses derive from it (and
// take its vtable and typeinfo from this library); the modules of this library are RustModules.
class __attribute__((visibility("default"))) ModuleNode : public Object {
 public:
  virtual ~ModuleNode() = default;
  virtual const char* type_key() const = 0;
  virtual PackedFunc GetFunction(const String& name, const ObjectPtr<Object>& sptr_to_self) = 0;
  virtual void SaveToFile(const String& file_name, const String& format);
  virtual void SaveToBinary(dmlc::Stream* stream);
  virtual String GetSource(const String& format);
  virtual String GetFormat();
  virtual int GetPropertyMask() const { return 0; }
  virtual bool ImplementsFunction(const String& name, bool query_imports);

  PackedFunc GetFunction(const String& name, bool query_imports);
  void Import(Module other);
  const PackedFunc* GetFuncFromEnv(const String& name);
  // The C++ layer's own access to a host module's imports_ (a friend adds no member).
  friend struct HostImports;

 protected:
  std::vector<Module> imports_;

 private:
  std::unordered_map<std::string, std::shared_ptr<PackedFunc>> import_cache_;
  std::mutex mutex_;
};
// Upstream's members in upstream's order, nothing between them: 144 bytes on x86_64, more where
// std::mutex is larger (48 bytes on aarch64), as upstream's own class is there.
static_assert(sizeof(ModuleNode) == sizeof(void*) + sizeof(Object) + sizeof(std::vector<Module>) +
                                        sizeof(std::unordered_map<std::string, std::shared_ptr<PackedFunc>>) +
                                        sizeof(std::mutex),
              "upstream's ModuleNode: vtable, object header, imports_, import_cache_, mutex_");
#if defined(__x86_64__)
static_assert(sizeof(ModuleNode) == 144, "upstream's ModuleNode is 144 bytes on x86_64");
#endif

// Upstream's layout: hosts' inline set_body_typed reads name_.
class Registry {
 public:
  TVMRT_EXPORT static const PackedFunc* Get(const String& name);
  TVMRT_EXPORT static Registry& Register(const String& name, bool can_override);
  TVMRT_EXPORT static bool Remove(const String& name);
  TVMRT_EXPORT static std::vector<String> ListNames();
  TVMRT_EXPORT Registry& set_body(PackedFunc f);

  String name_;
  PackedFunc func_;
};
static_assert(sizeof(Registry) == 16, "upstream's Registry is a name and a function");

TVMRT_EXPORT bool RuntimeEnabled(const String& target);
TVMRT_EXPORT void EnvCheckSignals();
TVMRT_EXPORT std::string GetCustomTypeName(uint8_t type_code);
TVMRT_EXPORT bool GetCustomTypeRegistered(uint8_t type_code);
TVMRT_EXPORT uint8_t ParseCustomDatatype(const std::string& s, const char** scan);

namespace detail {
class LogFatal {
 public:
  // Upstream's Entry, member for member: LOG(FATAL) fills it through inline code.
  struct Entry {
    std::ostringstream stream_;
    std::string file_;
    int lineno_;
  };
  TVMRT_EXPORT static Entry& GetEntry();
};

class LogMessage {
 public:
  TVMRT_EXPORT static const char* level_strings_[];
};

// Upstream's settings of TVM_LOG_DEBUG, member for member (hosts' inline FromFlag copies it).
class TvmLogDebugSettings {
 public:
  TVMRT_EXPORT static TvmLogDebugSettings ParseSpec(const char* opt_spec);
  TVMRT_EXPORT bool VerboseEnabledImpl(const std::string& filename, int level) const;

  bool dlog_enabled_ = false;
  std::unordered_map<std::string, int> vlog_level_map_;
};
}  // namespace detail

}  // namespace runtime
}  // namespace tvm

// ---- Helpers the files of this layer share (defined in packed.cc and containers.cc). ----
namespace tvmrt {
using namespace tvm::runtime;

// Static type indices of upstream 0.16 that this layer converts at the boundary.
constexpr uint32_t kModuleIndex = 1, kStringIndex = 3, kArrayIndex = 4, kMapIndex = 5, kShapeTupleIndex = 6,
                   kAdtIndex = 11;

// Throws the last C error unless `rc` is 0.
void Check(int rc);
// An NDArray handle (DLTensor*) is its object + 16.
Object* ArrayObject(TVMArrayHandle h);
// Drops what a host's return value holds, as upstream's inline TVMRetValue::Clear() does.
void ClearRet(TVMRetValueLayout* rv);
// The core module a host-facing module stands for.
Object* NativeModule(Object* module);
// A host's own PackedFuncObj called from C, and the release of its count.
int CallHostFunction(TVMValue* values, int* codes, int num_args, TVMRetValueHandle ret, void* resource);
void ReleaseHostFunction(void* resource);
// Whether `obj` is one of this runtime's functions (its call pointer is ours).
bool IsOurs(const Object* obj);
// A C handle for `func`, a host's function or one of ours.
TVMFunctionHandle Adopt(Object* func);
TVMFunctionHandle GlobalFunction(const char* name);
TVMValue CallGlobal(const char* name, std::vector<TVMValue> args, std::vector<int> codes, int* ret_code);
Object* MakeShapeTuple(const int64_t* dims, size_t n);
String MakeString(const char* s);
Object* OwnShapeTuple(const Object* shape);
// Containers across the boundary: upstream's layouts for hosts, the core's own for the core.
Object* ToHost(Object* obj);
Object* ToNative(Object* obj);
Object* ItemOfNative(Object* array, int64_t i);
int64_t SizeOfNative(Object* array);
// The call shim's argument conversion and return value.
bool NeedsConversion(const TVMValue& v, int code);
void SetRet(TVMRetValueLayout* rv, TVMValue ret, int code);
}  // namespace tvmrt

#endif  // TVMRT_CXX_RUNTIME_H_
