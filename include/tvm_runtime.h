/*
 * tvm_runtime.h: the C API of this drop-in libtvm_runtime.so, compatible with TVM 0.16's
 * c_runtime_api.h and c_backend_api.h (same names, types, type codes and return conventions).
 *
 * Conventions
 * - Every int-returning function returns 0 on success and -1 on failure; the message is then in
 *   TVMGetLastError() (thread-local, "<Kind>: <text>", valid until the next error on the thread).
 * - Handles: TVMModuleHandle / TVMFunctionHandle / TVMObjectHandle point at a 16-byte object header
 *   (type index, reference count, deleter); TVMArrayHandle is the DLTensor inside an NDArray object
 *   (header at handle - 16). Values returned by TVMFuncCall with codes 8, 9, 10 and 13 hand one
 *   reference to the caller (release with TVMObjectFree / TVMModFree / TVMFuncFree / TVMArrayFree);
 *   arguments are borrowed for the call. Freeing NULL is a no-op.
 * - Strings and bytes returned by TVMFuncCall live in thread-local storage until the next call on the
 *   same thread.
 * - Everything here is thread-safe except where noted; a graph executor serialises concurrent calls
 *   on itself (use one executor per thread to run in parallel; executors can share weights).
 *
 * Graph executor functions (TVMModGetFunction on an executor module): set_input, set_input_zero_copy,
 * set_output_zero_copy, get_input, get_output, get_num_inputs, get_num_outputs, get_input_index,
 * get_output_index, get_input_info, get_output_info, run, run_from_inputs, load_params,
 * share_params, share_activations, join_arena_pool, load_params_from_file, prepare_params,
 * get_memory_usage, set_fold_weights, set_strict_inputs.
 * - share_params(other, params_bytes): binds this executor's inputs named in params_bytes to the
 *   other executor's memory for them (matched by name; shape and dtype must agree, or -1 naming the
 *   parameter). This executor then holds no memory of its own for them; the shared memory lives as
 *   long as any holder. Executors created by one factory's "default" share the factory's weights.
 * - Copy on write: writing a shared weight (set_input, load_params, or get_input, which hands out
 *   a writable view) first gives this executor a private copy; the other holders are unaffected.
 * - Pools of activation arenas: an executor in a pool holds no activation arena between runs; each
 *   run leases one of the pool's arenas (sized for the largest member, made as runs overlap, at
 *   most the pool's capacity C) and gives it back when it ends (on a device, once the device has
 *   finished the run). C runs proceed at once; a further run waits for an arena, and after the
 *   pool's timeout (TVM_RT_ARENA_POOL_TIMEOUT_MS, 60000) returns -1, the executor unchanged. Inputs,
 *   outputs and views of them stay each executor's own. Executors on several devices, debug
 *   executors and graphs laid out by storage id (inputs or outputs among operator results) keep
 *   their own arenas (joining returns -1 saying why).
 *   TVM_RT_ARENA_POOL=C, or the global tvmrt.executor.SetArenaPool(C): executors made from then on
 *   (by any route) join their device's default pool of C (0: none, the default);
 *   tvmrt.executor.GetArenaPool(dev_type, dev_id) returns that pool (None when unset).
 *   tvmrt.executor.ArenaPool(dev_type, dev_id, C) makes a pool of its own: a module whose functions
 *   are join(executor), get_usage() (JSON: capacity, members, arenas, arena_bytes, bytes, lent, waiting,
 *   leases, waits, waited_ms, timeouts, peak_lent), set_capacity(C), set_timeout_ms(ms); an
 *   executor's join_arena_pool(pool) joins it too.
 * - share_activations(other): this executor and other join other's pool, or a new pool of one
 *   arena: executors used in turn (batch-1 and batch-8 builds) hold one arena; a run while another
 *   holder runs waits for it.
 * - load_params_from_file(path) maps a params file read-only; weights whose data is 64-byte aligned
 *   in the file are used in place (no copy; one copy in the page cache for all processes), the rest
 *   are copied; returns how many were mapped. Writes to a mapped weight copy it first and never reach
 *   the file. The global runtime.AlignParams(bytes) (and `tvmrt align-params`) rewrites a params file
 *   so every tensor is aligned; upstream TVM still loads the result. A prepared params file (`tvmrt
 *   prepare-params`, or prepare_params(params_bytes) on an executor, which returns the file's bytes)
 *   also holds the derived weights, stamped with the graph, library and weights
 *   they were made from: loaded with load_params_from_file they are mapped in place where the stamp
 *   holds; elsewhere (another build, weights edited since) the file loads as plain params and
 *   get_memory_usage's "prepared_params" says why ("used" when they were). A mapped file written
 *   in place is refused before the next run (-1, saying so): replace a mapped file by renaming a
 *   new one over it, never by writing it (a file truncated during a run faults, as any mapping).
 * - Weight-only operators run once for executors sharing weights: once the weights have a second
 *   holder (an executor sharing them, a factory, a linked library), an operator whose inputs are all
 *   weights (directly or through other such operators) runs when the weights are bound, and its
 *   result is kept read-only (equal results of any executors in the process are held once); run
 *   executes the rest. A lone executor runs them at every run, as upstream (no more memory than
 *   upstream's), until another shares its weights; left alone again, it keeps them folded for
 *   TVM_RT_FOLD_KEEP_MS (2000) milliseconds, so sharers made per request find them, then lets the
 *   derived weights go at its next run. Writing such a weight (set_input, get_input's
 *   view) makes what reads it run at every run again; load_params derives again. Weights mapped
 *   from a file (load_params_from_file) are not folded unless asked: their derived results would be
 *   private to each process; a debug executor folds nothing, so it runs and times every node as
 *   upstream's. set_fold_weights(1) folds everything (a lone executor too), set_fold_weights(0)
 *   nothing, for one executor; TVM_RT_FOLD_WEIGHTS=1 or =0 sets the process default. Outputs are
 *   the same bytes either way.
 * - get_memory_usage() returns a JSON string: {"weights_owned", "weights_shared", "weights_mapped",
 *   "weights_derived", "activations", "activations_shared", "activation_arena", "activation_bound",
 *   "ops_folded", "ops_total", "workspace"}, sizes in bytes (weights_derived: results of the
 *   operators run once; activations: this executor's inputs and its own activation arena;
 *   activation_arena: the arena its layout needs, laid out by liveness, own or in a pool;
 *   activation_bound: its inputs plus the least any layout of the arena could take;
 *   activations_shared: the arenas the executor's pool holds now, the same figure for every member,
 *   to count once; workspace: all threads' kernel scratch pools), "prepared_params" after a
 *   prepared params file was mapped, and "pool" (as the pool's get_usage) for a pooled executor.
 * - Memory returns: large buffers are unmapped when freed; when the last executor goes, the calling
 *   thread's idle workspaces and worker threads are released too.
 * - set_input with an unknown name fails (upstream ignored it); get_input with an unknown name
 *   returns None (type code 4), as upstream.
 */
#include <stdint.h>
#include <stddef.h>

#ifndef TVM_RUNTIME_RS_H_
#define TVM_RUNTIME_RS_H_

/* Generated by cbindgen from the Rust sources (build.rs). Do not edit: run `TVM_RT_WRITE_HEADER=1 cargo build`. */

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

// `DLDataTypeCode` values.
#define kDLInt 0

#define kDLUInt 1

#define kDLFloat 2

#define kDLOpaqueHandle 3

#define kDLBfloat 4

#define kDLBool 6

// Every block is at least this aligned (TVM's kAllocAlignment); devices align to it too.
#define ALIGNMENT 64

#define BINARY_SERIALIZABLE 1

#define RUNNABLE 2

#define DSO_EXPORTABLE 4

#define OBJECT 0

#define MODULE 1

#define NDARRAY 2

#define STRING 3

#define ARRAY 4

#define MAP 5

#define SHAPE_TUPLE 6

#define PACKED_FUNC 7

#define DISCO_DREF 8

#define RPC_OBJECT_REF 9

#define CLOSURE 10

#define ADT 11

#define STATIC_END 12

#define NDARRAY_LIST_MAGIC 17862838867561061559ull

#define NDARRAY_MAGIC 15951258332257624383ull

// What `align` aligns tensor data to: what kernels assume of their buffers.
#define DATA_ALIGNMENT 64

// An NDArray handle (`DLTensor*`, type code 13) is its object's header address plus this: the
// tensor is the payload's first field, right after the 16-byte header.
#define NDARRAY_TENSOR_OFFSET 16

// Device type codes (`DLDeviceType`). The CPU and OpenCL are served (see the device module).
typedef int32_t DLDeviceType;

// A device: type and ordinal. 8 bytes.
typedef struct DLDevice {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

// An element type: code, bits, lanes. 4 bytes.
typedef struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

// A tensor as kernels see it. `data + byte_offset` is the first element; `strides == NULL` means
// compact row-major.
typedef struct DLTensor {
  void *data;
  struct DLDevice device;
  int32_t ndim;
  struct DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} DLTensor;

typedef struct DLTensor *TVMArrayHandle;

typedef void *TVMStreamHandle;

// A DLPack tensor with its owner's deleter.
typedef struct DLManagedTensor {
  struct DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor*);
} DLManagedTensor;

typedef void *TVMFunctionHandle;

// The environment of one parallel launch, as compiled kernels read it.
typedef struct TVMParallelGroupEnv {
  void *sync_handle;
  int32_t num_task;
} TVMParallelGroupEnv;

// The body of a parallel loop handed to `TVMBackendParallelLaunch`.
typedef int32_t (*FTVMParallelLambda)(int32_t task_id, struct TVMParallelGroupEnv *penv, void *cdata);

// One packed-call value; which member is live is said by the type code beside it.
typedef union TVMValue {
  int64_t v_int64;
  double v_float64;
  void *v_handle;
  const char *v_str;
  struct DLDataType v_type;
  struct DLDevice v_device;
} TVMValue;

// A host callback exposed as a packed function (`TVMFuncCreateFromCFunc`).
typedef int32_t (*TVMPackedCFunc)(union TVMValue *args, int32_t *type_codes, int32_t num_args, void *ret, void *resource_handle);

// Called once with the resource handle when a callback function is destroyed.
typedef void (*TVMPackedCFuncFinalizer)(void *resource_handle);

typedef void *TVMRetValueHandle;

// Handle typedefs of `c_runtime_api.h`.
typedef void *TVMModuleHandle;

typedef void *TVMObjectHandle;

// A byte string passed by pointer (type code `kTVMBytes`).
typedef struct TVMByteArray {
  const char *data;
  size_t size;
} TVMByteArray;

// Packed-call argument type codes (`TVMArgTypeCode`).
typedef int32_t TVMArgTypeCode;

// The signature of every operator a compiled library exports.
typedef int32_t (*TVMBackendPackedCFunc)(union TVMValue *args, int32_t *type_codes, int32_t num_args, union TVMValue *out_ret_value, int32_t *out_ret_tcode, void *resource_handle);

#define kDLCPU 1

#define kDLCUDA 2

#define kDLCUDAHost 3

#define kDLOpenCL 4

#define kDLVulkan 7

#define kDLMetal 8

#define kTVMArgInt 0

#define kTVMArgFloat 2

#define kTVMOpaqueHandle 3

#define kTVMNullptr 4

#define kTVMDataType 5

#define kDLDevice 6

#define kTVMDLTensorHandle 7

#define kTVMObjectHandle 8

#define kTVMModuleHandle 9

#define kTVMPackedFuncHandle 10

#define kTVMStr 11

#define kTVMBytes 12

#define kTVMNDArrayHandle 13

#define kTVMObjectRValueRefArg 14

#define kTVMExtBegin 15



#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// Allocates an uninitialised (here: zeroed) array on a device (64-byte aligned on the CPU).
int TVMArrayAlloc(const int64_t *shape, int ndim, int dtype_code, int dtype_bits, int dtype_lanes, int device_type, int device_id, TVMArrayHandle *out_handle);

// Releases the caller's reference to an array (NULL is a no-op); the memory goes with the last
// reference (views and executors may hold others).
int TVMArrayFree(TVMArrayHandle handle);

// Copies `nbytes` host bytes into a compact array on any device; `nbytes` must equal the array's
// size. Returns once the array holds them. Not synchronised with other writers of the array.
int TVMArrayCopyFromBytes(TVMArrayHandle handle, void *data, size_t nbytes);

// Copies a compact array on any device out into `nbytes` host bytes (after the work queued on
// it); `nbytes` must equal its size.
int TVMArrayCopyToBytes(TVMArrayHandle handle, void *data, size_t nbytes);

// Copies array to array (any `DLTensor*`, host or device); byte sizes must match, shapes are not
// compared. Streams are not used: copies go on the device's one queue, in order.
int TVMArrayCopyFromTo(TVMArrayHandle from, TVMArrayHandle to, TVMStreamHandle _stream);

// The type index of the array object (2), as Python asks for every returned array.
int TVMArrayGetTypeIndex(TVMArrayHandle handle, uint32_t *out_index);

// Wraps a DLPack tensor without copying; the new array calls its deleter when freed.
int TVMArrayFromDLPack(struct DLManagedTensor *from, TVMArrayHandle *out_handle);

// Exports an array as DLPack; the array stays alive until the tensor's deleter runs.
int TVMArrayToDLPack(TVMArrayHandle from, struct DLManagedTensor **out_tensor);

// Calls a DLPack tensor's deleter (NULL is a no-op).
void TVMDLManagedTensorCallDeleter(struct DLManagedTensor *t);

// Finds a function for compiled code: the imports of its library, then the global registry.
// The handle is borrowed and stays valid as long as the library.
int TVMBackendGetFuncFromEnv(void *mod_node, const char *func_name, TVMFunctionHandle *out_func);

// Scratch memory for a kernel, 64-byte aligned, from the calling thread's pool; NULL on failure.
void *TVMBackendAllocWorkspace(int device_type, int device_id, uint64_t nbytes, int _dtype_code_hint, int _dtype_bits_hint);

// Returns a workspace to the calling thread's pool; it must come from TVMBackendAllocWorkspace
// on the same thread.
int TVMBackendFreeWorkspace(int device_type, int device_id, void *ptr);

// Runs `flambda` on `num_task` concurrent tasks (0 = all threads) and waits for them.
int TVMBackendParallelLaunch(FTVMParallelLambda flambda, void *cdata, int num_task);

// Waits until every task of the current parallel launch reaches the barrier.
int TVMBackendParallelBarrier(int _task_id, struct TVMParallelGroupEnv *penv);

// Runs `f(cdata)` the first time a given handle slot is seen.
int TVMBackendRunOnce(void **handle, int (*f)(void*), void *cdata, int _nbytes);

// Records a symbol of a `--system-lib` object (called from its static constructors); the
// module comes from the global `runtime.SystemLib`. Thread-safe.
int TVMBackendRegisterSystemLibSymbol(const char *name, void *ptr);

// Front-end callbacks: Python's signal check and reference counting.
int TVMBackendRegisterEnvCAPI(const char *name, void *ptr);

// Allocates `nbytes` (zeroed) on a device (aligned to at least 64 bytes on the CPU); free with
// TVMDeviceFreeDataSpace.
int TVMDeviceAllocDataSpace(struct DLDevice dev, size_t nbytes, size_t alignment, struct DLDataType _type_hint, void **out_data);

// Allocates a compact tensor's bytes on a device (scope NULL, "" or "global"), or an image for
// it in a texture scope on a device with images; free with TVMDeviceFreeDataSpace.
int TVMDeviceAllocDataSpaceWithScope(struct DLDevice dev, int ndim, const int64_t *shape, struct DLDataType dtype, const char *mem_scope, void **out_data);

// Frees memory from TVMDeviceAllocDataSpace(WithScope); NULL is a no-op.
int TVMDeviceFreeDataSpace(struct DLDevice dev, void *ptr);

// Copies tensor to tensor, as TVMArrayCopyFromTo.
int TVMDeviceCopyDataFromTo(struct DLTensor *from, struct DLTensor *to, TVMStreamHandle _stream);

// A new stream on the device: a command queue of its own on OpenCL; NULL on the CPU, which has
// none (see `DeviceApi`'s streams).
int TVMStreamCreate(int device_type, int device_id, TVMStreamHandle *out_stream);

// Waits for the stream's work and releases it (NULL: nothing to free).
int TVMStreamFree(int device_type, int device_id, TVMStreamHandle stream);

// Makes `stream` the calling thread's current stream on the device: the work this library
// queues from the thread (executor runs, copies) goes on it. NULL: the device's own queue.
int TVMSetStream(int device_type, int device_id, TVMStreamHandle stream);

// Waits until the device has finished the work on `stream` (NULL: the calling thread's current
// stream; at once on the CPU).
int TVMSynchronize(int device_type, int device_id, TVMStreamHandle stream);

// Orders the work queued on `dst` from now on after the work queued on `src` so far.
int TVMStreamStreamSynchronize(int device_type, int device_id, TVMStreamHandle src, TVMStreamHandle dst);

// The calling thread's last error message (empty if none). Valid until the next error on this
// thread; successful calls do not clear it.
const char *TVMGetLastError(void);

// Sets the calling thread's last error (kernels call this through `__TVMAPISetLastError`).
void TVMAPISetLastError(const char *msg);

// Stores a Python exception object (a callback's failure) for the caller to re-raise.
void TVMAPISetLastPythonError(void *py_object);

// The stored Python exception (borrowed), or NULL when the last error is a message.
void *TVMGetLastPythonError(void);

// Releases the stored Python exception.
void TVMDropLastPythonError(void);

// No C++ backtrace is recorded: always NULL.
const char *TVMGetLastBacktrace(void);

// Calls a packed function. Arguments are borrowed for the call. The result: codes 8, 9, 10
// and 13 hand one reference to the caller; strings (code 11) and bytes (code 12) live in
// thread-local storage until the next call on this thread; 4 means no result. Thread-safe.
int TVMFuncCall(TVMFunctionHandle func, union TVMValue *arg_values, int *type_codes, int num_args, union TVMValue *ret_val, int *ret_type_code);

// Releases the caller's reference to a function (NULL is a no-op).
int TVMFuncFree(TVMFunctionHandle func);

// Wraps a C callback as a packed function (one reference to the caller). `resource_handle`
// is passed to every call; `fin`, if set, runs once with it when the function is destroyed.
int TVMFuncCreateFromCFunc(TVMPackedCFunc func, void *resource_handle, TVMPackedCFuncFinalizer fin, TVMFunctionHandle *out_handle);

// Sets the return value of a callback; `num_ret` must be 1.
int TVMCFuncSetReturn(TVMRetValueHandle ret, union TVMValue *value, int *type_code, int num_ret);

// Turns a borrowed callback argument into an owned value in place.
int TVMCbArgToReturn(union TVMValue *value, int *code);

// Registers `f` under `name` (the registry takes its own reference; the caller keeps its own).
// An existing name is an error unless `override_` is non-zero.
int TVMFuncRegisterGlobal(const char *name, TVMFunctionHandle f, int override_);

// Looks up a global function: a new reference, or `*out` = NULL (and 0) when there is none.
int TVMFuncGetGlobal(const char *name, TVMFunctionHandle *out_handle);

// The names of all global functions, in thread-local storage valid until the next call on
// this thread.
int TVMFuncListGlobalNames(int *out_size, const char ***out_array);

// Removes a global function (absent names are not an error).
int TVMFuncRemoveGlobal(const char *name);

// Loads a module (a shared library from `export_library`); `format` may be empty to take it
// from the file extension.
int TVMModLoadFromFile(const char *file_name, const char *format, TVMModuleHandle *out_handle);

// Adds `dep` to `mod`'s imports.
int TVMModImport(TVMModuleHandle module, TVMModuleHandle dep);

// Looks up a function; `*out` is NULL (and the call succeeds) when there is none.
int TVMModGetFunction(TVMModuleHandle module, const char *func_name, int query_imports, TVMFunctionHandle *out_handle);

// Releases the caller's reference to a module (NULL is a no-op). Functions and executors
// obtained from it keep what they need alive.
int TVMModFree(TVMModuleHandle module);

// The type index of an object (TVM 0.16's static indices: Module 1, NDArray 2, String 3,
// Array 4, Map 5, ShapeTuple 6, PackedFunc 7).
int TVMObjectGetTypeIndex(TVMObjectHandle obj, uint32_t *out_tindex);

// Takes one more reference to an object.
int TVMObjectRetain(TVMObjectHandle obj);

// Drops one count; NULL is accepted.
int TVMObjectFree(TVMObjectHandle obj);

// The type index of a type key; unknown keys (and "runtime.Object") are an error.
int TVMObjectTypeKey2Index(const char *type_key, uint32_t *out_tindex);

// The key of a type index, as a `malloc`ed string the caller frees with `free`.
int TVMObjectTypeIndex2Key(uint32_t tindex, char **out_type_key);

// Whether type `child` is `parent` or derives from it.
int TVMObjectDerivedFrom(uint32_t child_type_index, uint32_t parent_type_index, int *is_derived);

// Byte arrays returned by `TVMFuncCall` live in thread-local storage: nothing to free.
int TVMByteArrayFree(struct TVMByteArray *arr);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* TVM_RUNTIME_RS_H_ */
