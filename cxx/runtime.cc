// The C++ face of libtvm_runtime.so: the out-of-line entry points that programs written against
// TVM 0.16's C++ headers (tvm/runtime/module.h, packed_func.h, registry.h, ndarray.h, logging.h)
// link to, and the call shim that makes this runtime's functions callable by those headers' inline
// code. Everything here goes through the C API of the Rust core; nothing here knows its internals.
//
// The classes below are this file's own minimal declarations of upstream's, written from the ABI
// facts (names for the mangling, sizes and field offsets where inline host code reads them): an
// ObjectRef is one pointer with non-trivial copy and destruction (so it is passed by invisible
// reference and returned through a hidden pointer), an object starts with upstream's 16-byte header,
// a ModuleNode handed to a host is the object address minus 8 (upstream's vtable pointer comes
// first), a TVMArgs travels by value in memory.
//
// C++ exceptions never reach Rust: every Rust -> C++ call (a host's PackedFunc) is wrapped in
// try/catch and becomes a C status, and every C error becomes a thrown tvm::runtime::InternalError.

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

static void IncRef(Object* o) {
  if (o) o->ref_counter_.fetch_add(1, std::memory_order_relaxed);
}

static void DecRef(Object* o) {
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
static std::string StringOf(const Object* obj) {
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
class Stream;
}

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

 protected:
  std::vector<Module> imports_;

 private:
  std::unordered_map<std::string, std::shared_ptr<PackedFunc>> import_cache_;
  std::mutex mutex_;
};
static_assert(sizeof(ModuleNode) == 144, "upstream's ModuleNode is 144 bytes");

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

using namespace tvm::runtime;

// Shared with the other C++ files of this layer (declared in bridge.h).
[[noreturn]] void tvmrt::ThrowLastError() { throw InternalError("libtvm_runtime.so", 0, TVMGetLastError()); }

namespace {

// Throws the thread's last C error as upstream would: an InternalError.
[[noreturn]] void ThrowLastError() { tvmrt::ThrowLastError(); }

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

// Static type indices of upstream 0.16 that this layer converts at the boundary.
constexpr uint32_t kModuleIndex = 1, kStringIndex = 3, kArrayIndex = 4, kMapIndex = 5, kShapeTupleIndex = 6;

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

// ---------------------------------------------------------------------------------------------
// Containers. Hosts read arrays and maps with the headers' inline code, so an Array or a Map that
// crosses to a C++ host is rebuilt with upstream's layouts (ArrayNode; SmallMapNode up to 4 entries,
// DenseMapNode beyond), and one that comes back is rebuilt as this runtime's own.


struct KV {
  Object* key;
  Object* value;
};

// ArrayNode: the header, int64 size_ and capacity_, then the elements.
struct HostArray {
  Object header;
  int64_t size_;
  int64_t capacity_;
  Object** elems() { return reinterpret_cast<Object**>(this + 1); }
};
static_assert(sizeof(HostArray) == 32, "upstream's ArrayNode header is 32 bytes");

// MapNode: the header, uint64 slots_ and size_; a SmallMapNode's pairs follow, a DenseMapNode has
// uint32 fib_shift_ and a pointer to blocks of 16 metadata bytes and 16 pairs.
struct HostMap {
  Object header;
  uint64_t slots_;
  uint64_t size_;
};
struct HostDenseMap : HostMap {
  uint32_t fib_shift_;
  unsigned char* data_;
};
static_assert(sizeof(HostMap) == 32 && sizeof(HostDenseMap) == 48, "upstream's MapNode layouts");

constexpr int kBlockCap = 16;
constexpr size_t kBlockBytes = kBlockCap + kBlockCap * sizeof(KV);
constexpr uint8_t kEmptySlot = 0xFF;

void DeleteHostArray(Object* obj) {
  auto* a = reinterpret_cast<HostArray*>(obj);
  for (int64_t i = 0; i < a->size_; ++i) DecRef(a->elems()[i]);
  ::operator delete(a);
}

void DeleteSmallMap(Object* obj) {
  auto* m = reinterpret_cast<HostMap*>(obj);
  auto* kv = reinterpret_cast<KV*>(m + 1);
  for (uint64_t i = 0; i < m->size_; ++i) {
    DecRef(kv[i].key);
    DecRef(kv[i].value);
  }
  ::operator delete(m);
}

void DeleteDenseMap(Object* obj) {
  auto* m = reinterpret_cast<HostDenseMap*>(obj);
  uint64_t n_blocks = (m->slots_ + 1) / kBlockCap;
  for (uint64_t b = 0; b < n_blocks; ++b) {
    unsigned char* block = m->data_ + b * kBlockBytes;
    auto* kv = reinterpret_cast<KV*>(block + kBlockCap);
    for (int j = 0; j < kBlockCap; ++j) {
      if (block[j] != kEmptySlot) {
        DecRef(kv[j].key);
        DecRef(kv[j].value);
      }
    }
  }
  delete[] m->data_;
  ::operator delete(m);
}

// ObjectHash of the headers: the stable byte hash for strings, the address otherwise.
uint64_t HashOf(const Object* key) {
  if (!key || key->type_index_ != kStringIndex) return reinterpret_cast<uint64_t>(key);
  std::string s = StringOf(key);
  const uint64_t kMultiplier = 1099511628211ULL, kMod = 2147483647ULL;
  uint64_t result = 0;
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, s.data() + i, 8);  // little endian, as the hash reads it here
    result = (result * kMultiplier + word) % kMod;
  }
  if (i < s.size()) {
    uint64_t word = 0;
    std::memcpy(&word, s.data() + i, s.size() - i);
    result = (result * kMultiplier + word) % kMod;
  }
  return result;
}

Object* MakeHostArray(const std::vector<Object*>& items) {  // takes the items' counts
  auto* a = static_cast<HostArray*>(::operator new(sizeof(HostArray) + items.size() * sizeof(Object*)));
  a->header.type_index_ = kArrayIndex;
  new (&a->header.ref_counter_) std::atomic<int32_t>(1);
  a->header.deleter_ = DeleteHostArray;
  a->size_ = a->capacity_ = static_cast<int64_t>(items.size());
  for (size_t i = 0; i < items.size(); ++i) a->elems()[i] = items[i];
  return &a->header;
}

// A DenseMapNode holding `pairs` (their counts taken), or null when `slots` is too small for the
// short probe sequences used here. Every key's list head sits where its hash points (heads are
// placed first, so no later entry takes a head's slot), and the others hang off their head's list
// within 15 slots: exactly what the headers' lookup and iteration walk.
Object* TryDenseMap(const std::vector<KV>& pairs, uint64_t slots, uint32_t fib_shift) {
  std::vector<uint8_t> meta(slots, kEmptySlot);
  std::vector<int64_t> at(pairs.size(), -1);
  std::vector<uint64_t> home(pairs.size());
  const uint64_t coeff = 11400714819323198485ull;
  for (size_t i = 0; i < pairs.size(); ++i) {
    home[i] = (coeff * HashOf(pairs[i].key)) >> fib_shift;
    if (meta[home[i]] == kEmptySlot) {
      meta[home[i]] = 0x00;  // the head of a list, no next yet
      at[i] = static_cast<int64_t>(home[i]);
    }
  }
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (at[i] >= 0) continue;
    uint64_t tail = home[i];
    while ((meta[tail] & 0x7F) != 0) tail = (tail + (meta[tail] & 0x7F)) & (slots - 1);
    uint8_t jump = 0;
    for (uint8_t j = 1; j < kBlockCap; ++j) {
      if (meta[(tail + j) & (slots - 1)] == kEmptySlot) {
        jump = j;
        break;
      }
    }
    if (jump == 0) return nullptr;
    uint64_t slot = (tail + jump) & (slots - 1);
    meta[tail] = static_cast<uint8_t>((meta[tail] & 0x80) | jump);
    meta[slot] = 0x80;  // in a list, no next yet
    at[i] = static_cast<int64_t>(slot);
  }
  auto* m = static_cast<HostDenseMap*>(::operator new(sizeof(HostDenseMap)));
  m->header.type_index_ = kMapIndex;
  new (&m->header.ref_counter_) std::atomic<int32_t>(1);
  m->header.deleter_ = DeleteDenseMap;
  m->slots_ = slots - 1;
  m->size_ = pairs.size();
  m->fib_shift_ = fib_shift;
  m->data_ = new unsigned char[slots / kBlockCap * kBlockBytes];
  for (uint64_t s = 0; s < slots; ++s) m->data_[s / kBlockCap * kBlockBytes + s % kBlockCap] = meta[s];
  for (size_t i = 0; i < pairs.size(); ++i) {
    uint64_t s = static_cast<uint64_t>(at[i]);
    auto* kv = reinterpret_cast<KV*>(m->data_ + s / kBlockCap * kBlockBytes + kBlockCap) + s % kBlockCap;
    *kv = pairs[i];
  }
  return &m->header;
}

Object* MakeHostMap(const std::vector<KV>& pairs) {  // takes the pairs' counts
  if (pairs.size() <= 4) {
    auto* m = static_cast<HostMap*>(::operator new(sizeof(HostMap) + pairs.size() * sizeof(KV)));
    m->header.type_index_ = kMapIndex;
    new (&m->header.ref_counter_) std::atomic<int32_t>(1);
    m->header.deleter_ = DeleteSmallMap;
    m->slots_ = m->size_ = pairs.size();
    auto* kv = reinterpret_cast<KV*>(m + 1);
    for (size_t i = 0; i < pairs.size(); ++i) kv[i] = pairs[i];
    return &m->header;
  }
  // At most half full, a power of two (and whole blocks); larger until every list fits.
  uint64_t slots = 16;
  uint32_t fib_shift = 60;
  while (slots < pairs.size() * 2) {
    slots <<= 1;
    fib_shift -= 1;
  }
  for (;; slots <<= 1, fib_shift -= 1) {
    if (Object* m = TryDenseMap(pairs, slots, fib_shift)) return m;
  }
}

Object* ItemOfNative(Object* array, int64_t i) {
  TVMValue a, b;
  a.v_handle = array;
  b.v_int64 = i;
  int code = 0;
  TVMValue r = CallGlobal("runtime.ArrayGetItem", {a, b}, {kTVMObjectHandle, kDLInt}, &code);
  if (code == kTVMNDArrayHandle) return ArrayObject(static_cast<TVMArrayHandle>(r.v_handle));
  return static_cast<Object*>(r.v_handle);
}

int64_t SizeOfNative(Object* array) {
  TVMValue a;
  a.v_handle = array;
  int code = 0;
  return CallGlobal("runtime.ArraySize", {a}, {kTVMObjectHandle}, &code).v_int64;
}

// An object as a host sees it: this runtime's arrays and maps rebuilt with upstream's layouts
// (recursively), anything else as it is. Takes one count of `obj`, returns one.
Object* ToHost(Object* obj) {
  if (!obj || !tvmrt_object_is_native(obj)) return obj;
  if (obj->type_index_ == kModuleIndex) {
    // A stand-in for one of the host's own modules: the host gets its object back.
    auto* host = static_cast<Object*>(tvmrt_module_host_object(obj));
    if (!host) return obj;
    IncRef(host);
    DecRef(obj);
    return host;
  }
  if (obj->type_index_ == kArrayIndex) {
    int64_t n = SizeOfNative(obj);
    std::vector<Object*> items;
    for (int64_t i = 0; i < n; ++i) items.push_back(ToHost(ItemOfNative(obj, i)));
    DecRef(obj);
    return MakeHostArray(items);
  }
  if (obj->type_index_ == kMapIndex) {
    TVMValue a;
    a.v_handle = obj;
    int code = 0;
    auto* flat = static_cast<Object*>(CallGlobal("runtime.MapItems", {a}, {kTVMObjectHandle}, &code).v_handle);
    int64_t n = SizeOfNative(flat);
    std::vector<KV> pairs;
    for (int64_t i = 0; i + 1 < n; i += 2) pairs.push_back(KV{ToHost(ItemOfNative(flat, i)), ToHost(ItemOfNative(flat, i + 1))});
    DecRef(flat);
    DecRef(obj);
    return MakeHostMap(pairs);
  }
  return obj;
}

// The elements of a container with upstream's layout, borrowed.
std::vector<Object*> HostArrayItems(Object* obj) {
  auto* a = reinterpret_cast<HostArray*>(obj);
  return std::vector<Object*>(a->elems(), a->elems() + a->size_);
}

std::vector<KV> HostMapPairs(Object* obj) {
  auto* m = reinterpret_cast<HostMap*>(obj);
  std::vector<KV> out;
  if (m->slots_ <= 4) {
    auto* kv = reinterpret_cast<KV*>(m + 1);
    out.assign(kv, kv + m->size_);
    return out;
  }
  auto* d = reinterpret_cast<HostDenseMap*>(obj);
  for (uint64_t s = 0; s <= d->slots_; ++s) {
    unsigned char* block = d->data_ + s / kBlockCap * kBlockBytes;
    if (block[s % kBlockCap] == kEmptySlot || block[s % kBlockCap] == 0xFE) continue;
    out.push_back(reinterpret_cast<KV*>(block + kBlockCap)[s % kBlockCap]);
  }
  return out;
}

// An element passed on to this runtime: strings as characters (the core makes its own), shape
// tuples and containers rebuilt as its own; values are appended to `values`/`codes`, and what must
// be released after the call to `hold`.
void PushNative(Object* item, std::vector<TVMValue>& values, std::vector<int>& codes, std::deque<std::string>& strings,
                std::vector<Object*>& hold) {
  TVMValue v;
  if (item && !tvmrt_object_is_native(item) && item->type_index_ == kStringIndex) {
    strings.push_back(StringOf(item));
    v.v_str = strings.back().c_str();
    values.push_back(v);
    codes.push_back(kTVMStr);
    return;
  }
  IncRef(item);
  Object* own = ToNative(item);
  hold.push_back(own);
  v.v_handle = own;
  values.push_back(v);
  codes.push_back(own ? kTVMObjectHandle : kTVMNullptr);
}

// An object as this runtime keeps it: a host's (or this layer's) arrays, maps and shape tuples
// rebuilt as its own, anything else as it is. Takes one count of `obj`, returns one.
Object* ToNative(Object* obj) {
  if (!obj || tvmrt_object_is_native(obj)) return obj;
  if (obj->type_index_ == kShapeTupleIndex) {
    Object* own = OwnShapeTuple(obj);
    DecRef(obj);
    return own;
  }
  if (obj->type_index_ != kArrayIndex && obj->type_index_ != kMapIndex) return obj;
  std::vector<TVMValue> values;
  std::vector<int> codes;
  std::deque<std::string> strings;  // the characters stay where values point
  std::vector<Object*> hold;
  if (obj->type_index_ == kArrayIndex) {
    for (Object* item : HostArrayItems(obj)) PushNative(item, values, codes, strings, hold);
  } else {
    for (const KV& kv : HostMapPairs(obj)) {
      PushNative(kv.key, values, codes, strings, hold);
      PushNative(kv.value, values, codes, strings, hold);
    }
  }
  int code = 0;
  TVMValue r;
  try {
    r = CallGlobal(obj->type_index_ == kArrayIndex ? "runtime.Array" : "runtime.Map", values, codes, &code);
  } catch (...) {
    for (Object* o : hold) DecRef(o);
    DecRef(obj);
    throw;
  }
  for (Object* o : hold) DecRef(o);
  DecRef(obj);
  return static_cast<Object*>(r.v_handle);
}

}  // namespace

// The call pointer of every function this runtime makes (PackedFuncObj::f_call_packed_, at the
// object's offset 16), as hosts' inline `PackedFunc::operator()` invokes it.
namespace {
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
}  // namespace

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
      // A String object (perhaps the host's own): passed on as its characters.
      strings.push_back(StringOf(static_cast<Object*>(values[i].v_handle)));
      values[i].v_str = strings.back().c_str();
      codes[i] = kTVMStr;
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

// ---------------------------------------------------------------------------------------------
// Arrays.

namespace {
// Only the global (default) memory scope exists on the CPU.
void CheckScope(const Optional<String>& mem_scope) {
  std::string scope = StringOf(mem_scope.get());
  if (!scope.empty() && scope != "global")
    throw InternalError("libtvm_runtime.so", 0, "ValueError: memory scope '" + scope + "' is not supported on the CPU");
}
}  // namespace

NDArray NDArray::Empty(ShapeTuple shape, DLDataType dtype, DLDevice dev, Optional<String> mem_scope) {
  CheckScope(mem_scope);
  TVMArrayHandle h = nullptr;
  Check(TVMArrayAlloc(shape.data(), static_cast<int>(shape.size()), dtype.code, dtype.bits, dtype.lanes,
                      dev.device_type, dev.device_id, &h));
  return NDArray(ArrayObject(h));
}

void NDArray::CopyFromTo(const DLTensor* from, DLTensor* to, void* stream) {
  Check(TVMArrayCopyFromTo(const_cast<DLTensor*>(from), to, stream));
}

void NDArray::CopyFromBytes(const void* data, size_t nbytes) {
  Check(TVMArrayCopyFromBytes(tensor(), const_cast<void*>(data), nbytes));
}

void NDArray::CopyToBytes(void* data, size_t nbytes) const { Check(TVMArrayCopyToBytes(tensor(), data, nbytes)); }

ShapeTuple NDArray::Shape() const {
  const DLTensor* t = tensor();
  return ShapeTuple(MakeShapeTuple(t->shape, static_cast<size_t>(t->ndim)));
}

NDArray NDArray::CreateView(ShapeTuple shape, DLDataType dtype) {
  ObjectRef own(OwnShapeTuple(shape.get()));
  TVMValue v[3];
  v[0].v_handle = tensor();
  v[1].v_handle = own.get();
  std::ostringstream name;
  const char* kinds[] = {"int", "uint", "float", "handle", "bfloat"};
  name << (dtype.code < 5 ? kinds[dtype.code] : "custom") << static_cast<int>(dtype.bits);
  if (dtype.lanes != 1) name << "x" << dtype.lanes;
  std::string dtype_name = name.str();
  v[2].v_str = dtype_name.c_str();
  int code = 0;
  TVMValue r = CallGlobal("runtime.TVMArrayCreateView", {v[0], v[1], v[2]}, {kTVMNDArrayHandle, kTVMObjectHandle, kTVMStr},
                          &code);
  return NDArray(ArrayObject(static_cast<TVMArrayHandle>(r.v_handle)));
}

DLManagedTensor* NDArray::ToDLPack() const {
  DLManagedTensor* out = nullptr;
  Check(TVMArrayToDLPack(tensor(), &out));
  return out;
}

NDArray NDArray::FromDLPack(DLManagedTensor* tensor) {
  TVMArrayHandle h = nullptr;
  Check(TVMArrayFromDLPack(tensor, &h));
  return NDArray(ArrayObject(h));
}

// ---------------------------------------------------------------------------------------------
// The object protocol: static types from the core, types hosts define allocated here.

// The type table lives in the core (src/object/type_table.rs), shared with the C API.

uint32_t Object::TypeKey2Index(const std::string& key) {
  unsigned index = 0;
  Check(TVMObjectTypeKey2Index(key.c_str(), &index));
  return index;
}

std::string Object::TypeIndex2Key(uint32_t tindex) {
  char* key = nullptr;
  Check(TVMObjectTypeIndex2Key(tindex, &key));
  std::string out(key);
  std::free(key);
  return out;
}

size_t Object::TypeIndex2KeyHash(uint32_t tindex) { return std::hash<std::string>()(TypeIndex2Key(tindex)); }

uint32_t Object::GetOrAllocRuntimeTypeIndex(const std::string& key, uint32_t static_tindex, uint32_t parent_tindex,
                                            uint32_t num_child_slots, bool child_slots_can_overflow) {
  uint32_t index = 0;
  Check(tvmrt_type_index_alloc(key.c_str(), static_tindex, parent_tindex, num_child_slots,
                               child_slots_can_overflow, &index));
  return index;
}

bool Object::DerivedFrom(uint32_t parent_tindex) const {
  int derived = 0;
  Check(TVMObjectDerivedFrom(type_index_, parent_tindex, &derived));
  return derived != 0;
}

// ---------------------------------------------------------------------------------------------
// Odds and ends the headers' inline code reaches.

bool tvm::runtime::RuntimeEnabled(const String& target) {
  std::string t = target.str();
  return t == "cpu" || t == "llvm" || t == "c" || t.rfind("llvm ", 0) == 0;
}

void tvm::runtime::EnvCheckSignals() {}

std::string tvm::runtime::Backtrace() { return std::string(); }

std::string tvm::runtime::GetCustomTypeName(uint8_t type_code) {
  throw InternalError("libtvm_runtime.so", 0,
                      "ValueError: custom data type " + std::to_string(type_code) + " is not registered");
}

bool tvm::runtime::GetCustomTypeRegistered(uint8_t) { return false; }

uint8_t tvm::runtime::ParseCustomDatatype(const std::string& s, const char**) {
  throw InternalError("libtvm_runtime.so", 0, "ValueError: custom data types are not supported: " + s);
}

detail::LogFatal::Entry& detail::LogFatal::GetEntry() {
  static thread_local Entry entry;
  return entry;
}

const char* detail::LogMessage::level_strings_[] = {": Debug: ", ": ", ": Warning: ", ": Error: "};

// ---------------------------------------------------------------------------------------------
// TVM_LOG_DEBUG: "1" enables DLOG; "FILE=LEVEL,..." (FILE relative to a src/ folder, or DEFAULT)
// enables DLOG and VLOG up to LEVEL in FILE.

namespace {
// A file name as VLOG settings name it: the part after the last "/src/", if any.
std::string CanonicalFile(const std::string& file) {
  size_t at = file.rfind("/src/");
  if (at != std::string::npos) return file.substr(at + 5);
  if (file.rfind("src/", 0) == 0) return file.substr(4);
  return file;
}
}  // namespace

detail::TvmLogDebugSettings detail::TvmLogDebugSettings::ParseSpec(const char* opt_spec) {
  TvmLogDebugSettings settings;
  if (opt_spec == nullptr) return settings;
  std::string spec(opt_spec);
  if (spec.empty() || spec == "0") return settings;
  settings.dlog_enabled_ = true;
  if (spec == "1") return settings;
  // Entries are FILE=LEVEL separated by commas, read the way upstream reads them (getline to '='
  // then to ','), so an ill-formed spec is reported at the position upstream reports: where the
  // stream stands after the failing read, or, once it reached the end, the length of the spec
  // less what the last read took.
  size_t at = 0;
  bool at_end = false;
  // Reads up to `delim` (consumed) or to the end; false when nothing is left to read.
  auto read_until = [&](char delim, std::string* out) {
    if (at_end || at >= spec.size()) {
      at_end = true;
      out->clear();
      return false;
    }
    size_t stop = spec.find(delim, at);
    if (stop == std::string::npos) {
      *out = spec.substr(at);
      at = spec.size();
      at_end = true;
    } else {
      *out = spec.substr(at, stop - at);
      at = stop + 1;
    }
    return true;
  };
  auto position = [&](const std::string& last_read) { return at_end ? spec.size() - last_read.size() : at; };
  auto ill_formed = [&](const std::string& last_read, const std::string& what) {
    throw InternalError("libtvm_runtime.so", 0,
                        "TVM_LOG_DEBUG ill-formed at position " + std::to_string(position(last_read)) + ": " + what);
  };
  std::string name, level;
  while (read_until('=', &name)) {
    if (name.empty()) ill_formed(name, "empty filename");
    name = CanonicalFile(name);
    if (!read_until(',', &level)) ill_formed(level, "expecting \"=<level>\" after \"" + name + "\"");
    if (level.empty()) ill_formed(level, "empty level after \"" + name + "\"");
    char* end = nullptr;
    long value = std::strtol(level.c_str(), &end, 10);
    if (end != level.c_str() + level.size()) ill_formed(level, "invalid level: \"" + level + "\"");
    // The first setting of a file wins, as upstream's.
    settings.vlog_level_map_.emplace(name, static_cast<int>(value));
  }
  return settings;
}

bool detail::TvmLogDebugSettings::VerboseEnabledImpl(const std::string& filename, int level) const {
  auto it = vlog_level_map_.find(CanonicalFile(filename));
  if (it == vlog_level_map_.end()) it = vlog_level_map_.find("DEFAULT");
  return it != vlog_level_map_.end() && level <= it->second;
}

// ---------------------------------------------------------------------------------------------
// More of NDArray.

NDArray NDArray::CopyTo(const DLDevice& dev, Optional<String> mem_scope) const {
  const DLTensor* t = tensor();
  TVMArrayHandle h = nullptr;
  CheckScope(mem_scope);
  Check(TVMArrayAlloc(t->shape, t->ndim, t->dtype.code, t->dtype.bits, t->dtype.lanes, dev.device_type, dev.device_id, &h));
  NDArray out(ArrayObject(h));
  Check(TVMArrayCopyFromTo(const_cast<DLTensor*>(t), h, nullptr));
  return out;
}

tvm::runtime::DataType NDArray::DataType() const { return tvm::runtime::DataType{tensor()->dtype}; }

bool NDArray::IsAligned(const DLTensor& tensor) {
  return (reinterpret_cast<uintptr_t>(static_cast<char*>(tensor.data) + tensor.byte_offset) % 64) == 0;
}

namespace {
bool IsCompact(const DLTensor& t) {
  if (!t.strides) return true;
  int64_t expected = 1;
  for (int i = t.ndim - 1; i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

struct ExternalTensor {
  DLManagedTensor managed;
  std::vector<int64_t> shape;
};
}  // namespace

bool NDArray::AbilityOfZeroCopyForDLTensor(DLTensor* tensor, const DLDevice& dev) {
  return tensor->device.device_type == dev.device_type && tensor->device.device_id == dev.device_id &&
         IsAligned(*tensor) && IsCompact(*tensor);
}

NDArray NDArray::FromExternalDLTensor(const DLTensor& dl_tensor) {
  if (!IsAligned(dl_tensor) || !IsCompact(dl_tensor)) {
    throw InternalError("libtvm_runtime.so", 0,
                        "ValueError: FromExternalDLTensor needs a compact tensor aligned to 64 bytes");
  }
  // The memory stays the caller's: the DLPack wrapper's deleter frees only the wrapper.
  auto* ext = new ExternalTensor();
  ext->shape.assign(dl_tensor.shape, dl_tensor.shape + dl_tensor.ndim);
  ext->managed.dl_tensor = dl_tensor;
  ext->managed.dl_tensor.shape = ext->shape.data();
  ext->managed.dl_tensor.strides = nullptr;
  ext->managed.manager_ctx = ext;
  ext->managed.deleter = [](DLManagedTensor* self) { delete static_cast<ExternalTensor*>(self->manager_ctx); };
  TVMArrayHandle h = nullptr;
  if (TVMArrayFromDLPack(&ext->managed, &h) != 0) {
    delete ext;
    ThrowLastError();
  }
  return NDArray(ArrayObject(h));
}

NDArray NDArray::NewFromDLTensor(DLTensor* dl_tensor, const DLDevice& dev) {
  TVMArrayHandle h = nullptr;
  Check(TVMArrayAlloc(dl_tensor->shape, dl_tensor->ndim, dl_tensor->dtype.code, dl_tensor->dtype.bits,
                      dl_tensor->dtype.lanes, dev.device_type, dev.device_id, &h));
  NDArray out(ArrayObject(h));
  Check(TVMArrayCopyFromTo(dl_tensor, h, nullptr));
  return out;
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
