// The private calls between the Rust core and the C++ layer, in both directions: every `tvmrt_*`
// symbol either side defines for the other, declared once. None is part of the public C API
// (include/tvm_runtime.h leaves them out); their contracts are in the Rust definitions named here.
#ifndef TVMRT_CXX_BRIDGE_H_
#define TVMRT_CXX_BRIDGE_H_

#include <stddef.h>
#include <stdint.h>

#include "tvm_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- Defined in Rust, called by C++. ----

// src/cxx/objects.rs: whether `obj` is an object of the Rust core (else a host's).
int tvmrt_object_is_native(const void* obj);
// 0, or -1 with the last error set: a memory scope the device layer does not serve.
int tvmrt_check_memory_scope(const char* scope);
// src/cxx/objects.rs: whether the device layer serves a device type (DeviceAPI::Get), and the
// calling thread's current stream of a device.
int tvmrt_device_api_check(int device_type, int allow_missing, int* served);
int tvmrt_current_stream(int device_type, int device_id, void** stream);
// src/cxx/objects.rs: the index of a host's type, allocated with upstream's rules.
int tvmrt_type_index_alloc(const char* key, uint32_t static_tindex, uint32_t parent_tindex,
                           uint32_t num_child_slots, int child_slots_can_overflow, uint32_t* out);
// src/cxx/host_module.rs: a core module standing for a host's module (new count).
int tvmrt_module_from_host(void* obj, TVMModuleHandle* out);
// src/cxx/host_module.rs: the host module a stand-in holds (borrowed), or null.
void* tvmrt_module_host_object(void* module);
// src/cxx/threading.rs: the pool behind threading::Configure and friends.
int tvmrt_threading_configure(int mode, int nthreads, const uint32_t* cores, size_t n, int* used);
int tvmrt_threading_cores(int mode, const uint32_t* cores, size_t n, uint32_t* out, size_t cap);
int tvmrt_threading_max_concurrency(void);
void tvmrt_threading_set_max_concurrency(int value);
int tvmrt_threading_num_threads(void);
void tvmrt_threading_reset(void);

// src/tvm_ffi/module.rs: what a module object made for libtvm_ffi (cxx/ffi_module.cc) asks of
// the module it holds (`module`, our count; `handle`, the object). 0, or -1 with the last error.
int tvmrt_ffi_module_property_mask(void* module);
int tvmrt_ffi_module_get_function(void* module, void* handle, const char* name, size_t len, void** out);
int tvmrt_ffi_module_implements(void* module, void* handle, const char* name, size_t len, int* found);
int tvmrt_ffi_module_import(void* module, void* handle, void* other);
int tvmrt_ffi_module_clear_imports(void* module, void* handle);
void tvmrt_ffi_module_release(void* module, void* imports, void* lookup_cache);
int tvmrt_ffi_empty_array(void** out);

// ---- Defined in C++ (cxx/modules.cc, cxx/packed.cc), called by Rust. ----

// The vtable pointer core modules carry 8 bytes before their object header.
const void* tvmrt_cxx_module_vptr(void);
// Calls a host module's virtual GetFunction / type_key.
int tvmrt_cxx_host_module_get_function(void* obj, const char* name, TVMFunctionHandle* out);
const char* tvmrt_cxx_host_module_type_key(void* obj);
// Rebuilds / destroys the std::vector<Module> mirror of a core module's imports.
void tvmrt_cxx_set_imports(void* vector, void* const* modules, size_t n);
void tvmrt_cxx_drop_imports(void* vector);
// cxx/guard.cc: an operator's or a host callback's call, a C++ exception it throws turned into -1
// and the last error.
int tvmrt_cxx_guarded_kernel(TVMBackendPackedCFunc func, TVMValue* args, int* codes, int num_args, TVMValue* ret,
                             int* ret_code, void* resource);
int tvmrt_cxx_guarded_callback(TVMPackedCFunc func, TVMValue* args, int* codes, int num_args, TVMRetValueHandle ret,
                               void* resource);

#ifdef __cplusplus
}  // extern "C"
#endif

#ifdef __cplusplus
namespace tvmrt {
// Throws the thread's last C error as a tvm::runtime::InternalError (cxx/packed.cc).
[[noreturn]] void ThrowLastError();
}  // namespace tvmrt
#endif

#endif  // TVMRT_CXX_BRIDGE_H_
