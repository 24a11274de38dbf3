// tvm::runtime::DeviceAPI::Get(dev): the device API object C++ hosts call virtually (GPU hosts
// synchronise streams through it, some allocate and copy). Its vtable is upstream v0.16's, slot
// for slot as upstream's own library lays it out (read from its vtables): after the destructors,
// SetDevice, GetAttr, GetDataSize, GetTargetProperty, the two AllocDataSpace, FreeDataSpace,
// CopyDataFromTo, CreateStream, FreeStream, StreamSync, SetStream, GetCurrentStream,
// SyncStreamFromTo, AllocWorkspace, FreeWorkspace, then the protected byte-range CopyDataFromTo.
// The hhb-tvm wheel's header has no GetCurrentStream: hosts built against it reach the first twelve
// methods (through SetStream) as written, and the later ones one slot off (docs/DIFFERENCES.md).
// Every method goes through the C API, so this layer knows nothing of the devices; a failure is a
// thrown InternalError, as upstream's are.

#include "runtime.h"

namespace tvm {
namespace runtime {

enum DeviceAttrKind : int {};

class TVMRetValue;

class TVMRT_EXPORT DeviceAPI {
 public:
  virtual ~DeviceAPI() {}
  virtual void SetDevice(DLDevice dev) = 0;
  virtual void GetAttr(DLDevice dev, DeviceAttrKind kind, TVMRetValue* rv) = 0;
  virtual size_t GetDataSize(const DLTensor& arr, Optional<String> mem_scope);
  virtual void GetTargetProperty(DLDevice, const std::string&, TVMRetValue*) {}
  virtual void* AllocDataSpace(DLDevice dev, size_t nbytes, size_t alignment, DLDataType type_hint) = 0;
  virtual void* AllocDataSpace(DLDevice dev, int ndim, const int64_t* shape, DLDataType dtype,
                               Optional<String> mem_scope);
  virtual void FreeDataSpace(DLDevice dev, void* ptr) = 0;
  virtual void CopyDataFromTo(DLTensor* from, DLTensor* to, TVMStreamHandle stream);
  virtual TVMStreamHandle CreateStream(DLDevice dev);
  virtual void FreeStream(DLDevice dev, TVMStreamHandle stream);
  virtual void StreamSync(DLDevice dev, TVMStreamHandle stream) = 0;
  virtual void SetStream(DLDevice, TVMStreamHandle) {}
  virtual TVMStreamHandle GetCurrentStream(DLDevice dev);
  virtual void SyncStreamFromTo(DLDevice dev, TVMStreamHandle event_src, TVMStreamHandle event_dst);
  virtual void* AllocWorkspace(DLDevice dev, size_t nbytes, DLDataType type_hint);
  virtual void FreeWorkspace(DLDevice dev, void* ptr);
  static DeviceAPI* Get(DLDevice dev, bool allow_missing = false);

 protected:
  virtual void CopyDataFromTo(const void* from, size_t from_offset, void* to, size_t to_offset, size_t num_bytes,
                              DLDevice dev_from, DLDevice dev_to, DLDataType type_hint, TVMStreamHandle stream);
};

size_t DeviceAPI::GetDataSize(const DLTensor& arr, Optional<String>) {
  size_t n = 1;
  for (int i = 0; i < arr.ndim; ++i) n *= static_cast<size_t>(arr.shape[i]);
  return n * ((arr.dtype.bits * arr.dtype.lanes + 7) / 8);
}

void* DeviceAPI::AllocDataSpace(DLDevice dev, int ndim, const int64_t* shape, DLDataType dtype,
                                Optional<String> mem_scope) {
  std::string scope = StringOf(mem_scope.get());
  void* out = nullptr;
  tvmrt::Check(TVMDeviceAllocDataSpaceWithScope(dev, ndim, shape, dtype, mem_scope.get() ? scope.c_str() : nullptr,
                                                &out));
  return out;
}

void DeviceAPI::CopyDataFromTo(DLTensor* from, DLTensor* to, TVMStreamHandle stream) {
  tvmrt::Check(TVMDeviceCopyDataFromTo(from, to, stream));
}

TVMStreamHandle DeviceAPI::CreateStream(DLDevice dev) {
  TVMStreamHandle s = nullptr;
  tvmrt::Check(TVMStreamCreate(dev.device_type, dev.device_id, &s));
  return s;
}

void DeviceAPI::FreeStream(DLDevice dev, TVMStreamHandle stream) {
  tvmrt::Check(TVMStreamFree(dev.device_type, dev.device_id, stream));
}

TVMStreamHandle DeviceAPI::GetCurrentStream(DLDevice dev) {
  TVMStreamHandle s = nullptr;
  tvmrt::Check(tvmrt_current_stream(dev.device_type, dev.device_id, &s));
  return s;
}

void DeviceAPI::SyncStreamFromTo(DLDevice dev, TVMStreamHandle event_src, TVMStreamHandle event_dst) {
  tvmrt::Check(TVMStreamStreamSynchronize(dev.device_type, dev.device_id, event_src, event_dst));
}

void* DeviceAPI::AllocWorkspace(DLDevice dev, size_t nbytes, DLDataType type_hint) {
  void* p = TVMBackendAllocWorkspace(dev.device_type, dev.device_id, nbytes, type_hint.code, type_hint.bits);
  if (!p) tvmrt::ThrowLastError();
  return p;
}

void DeviceAPI::FreeWorkspace(DLDevice dev, void* ptr) {
  tvmrt::Check(TVMBackendFreeWorkspace(dev.device_type, dev.device_id, ptr));
}

void DeviceAPI::CopyDataFromTo(const void* from, size_t from_offset, void* to, size_t to_offset, size_t num_bytes,
                               DLDevice dev_from, DLDevice dev_to, DLDataType, TVMStreamHandle stream) {
  int64_t n = static_cast<int64_t>(num_bytes);
  DLDataType u8{kDLUInt, 8, 1};
  DLTensor a{const_cast<void*>(from), dev_from, 1, u8, &n, nullptr, from_offset};
  DLTensor b{to, dev_to, 1, u8, &n, nullptr, to_offset};
  tvmrt::Check(TVMDeviceCopyDataFromTo(&a, &b, stream));
}

}  // namespace runtime
}  // namespace tvm

namespace {
using namespace tvm::runtime;

// The device API of every device type, through the C API.
class CDeviceAPI final : public DeviceAPI {
 public:
  void SetDevice(DLDevice dev) final {
    int code = 0;
    tvmrt::CallGlobal("__tvm_set_device", {Int(dev.device_type), Int(dev.device_id)}, {kDLInt, kDLInt}, &code);
  }

  void GetAttr(DLDevice dev, DeviceAttrKind kind, TVMRetValue* rv) final {
    int code = 0;
    TVMValue v = tvmrt::CallGlobal("runtime.GetDeviceAttr", {Int(dev.device_type), Int(dev.device_id), Int(kind)},
                                   {kDLInt, kDLInt, kDLInt}, &code);
    auto* out = reinterpret_cast<TVMRetValueLayout*>(rv);
    tvmrt::ClearRet(out);
    tvmrt::SetRet(out, v, code);
  }

  void* AllocDataSpace(DLDevice dev, size_t nbytes, size_t alignment, DLDataType type_hint) final {
    void* out = nullptr;
    tvmrt::Check(TVMDeviceAllocDataSpace(dev, nbytes, alignment, type_hint, &out));
    return out;
  }
  using DeviceAPI::AllocDataSpace;

  void FreeDataSpace(DLDevice dev, void* ptr) final { tvmrt::Check(TVMDeviceFreeDataSpace(dev, ptr)); }

  void StreamSync(DLDevice dev, TVMStreamHandle stream) final {
    tvmrt::Check(TVMSynchronize(dev.device_type, dev.device_id, stream));
  }

  void SetStream(DLDevice dev, TVMStreamHandle stream) final {
    tvmrt::Check(TVMSetStream(dev.device_type, dev.device_id, stream));
  }

 private:
  static TVMValue Int(int64_t v) {
    TVMValue x;
    x.v_int64 = v;
    return x;
  }
};
}  // namespace

namespace tvm {
namespace runtime {

// One object for every device type: it holds nothing, each call names its device.
DeviceAPI* DeviceAPI::Get(DLDevice dev, bool allow_missing) {
  static CDeviceAPI api;
  int served = 0;
  tvmrt::Check(tvmrt_device_api_check(dev.device_type, allow_missing ? 1 : 0, &served));
  return served ? &api : nullptr;
}

}  // namespace runtime
}  // namespace tvm
