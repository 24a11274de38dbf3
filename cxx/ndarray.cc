// NDArray.

#include "runtime.h"

using namespace tvm::runtime;
using namespace tvmrt;

// ---------------------------------------------------------------------------------------------
// Arrays.

namespace {
// The scopes the device layer serves; its message otherwise.
void CheckScope(const Optional<String>& mem_scope) {
  if (mem_scope.get()) Check(tvmrt_check_memory_scope(StringOf(mem_scope.get()).c_str()));
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
