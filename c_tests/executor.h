/* Executor helpers shared by the C tests: creation through both paths, inputs from a fixture,
 * outputs compared with upstream's bytes. */
#ifndef TVM_RT_C_TESTS_EXECUTOR_H_
#define TVM_RT_C_TESTS_EXECUTOR_H_

#include "fixture.h"

static inline TVMFunctionHandle get_fn(TVMModuleHandle m, const char* name) {
  TVMFunctionHandle f = NULL;
  OK(TVMModGetFunction(m, name, 0, &f));
  CHECK(f != NULL, "executor has no function %s", name);
  return f;
}

static inline void load_params(TVMModuleHandle gmod, const char* dir) {
  char path[700];
  size_t size = 0;
  snprintf(path, sizeof path, "%s/params.bin", dir);
  void* blob = read_file(path, &size);
  CHECK(blob != NULL, "cannot read %s", path);
  if (!blob) return;
  TVMByteArray arr = {(const char*)blob, size};
  TVMValue v[1];
  int c[1] = {kTVMBytes};
  v[0].v_handle = &arr;
  TVMValue r;
  int rc;
  TVMFunctionHandle f = get_fn(gmod, "load_params");
  OK(call(f, v, c, 1, &r, &rc));
  TVMFuncFree(f);
  free(blob);
}

/* An executor on device (type, 0) from the factory's default function. */
static inline TVMModuleHandle create_from_factory_on(TVMModuleHandle lib, int device_type) {
  TVMFunctionHandle f = NULL;
  OK(TVMModGetFunction(lib, "default", 0, &f));
  CHECK(f != NULL, "no default function");
  if (!f) return NULL;
  TVMValue v[1], r;
  int c[1] = {kDLDevice}, rc = 0;
  v[0].v_device.device_type = (DLDeviceType)device_type;
  v[0].v_device.device_id = 0;
  OK(call(f, v, c, 1, &r, &rc));
  CHECK(rc == kTVMModuleHandle, "default returned type code %d", rc);
  TVMFuncFree(f);
  return rc == kTVMModuleHandle ? r.v_handle : NULL;
}

static inline TVMModuleHandle create_from_factory(TVMModuleHandle lib) {
  return create_from_factory_on(lib, kDLCPU);
}

/* An executor on device (type, 0) from tvm.graph_executor.create, no weights loaded. */
static inline TVMModuleHandle create_from_json_on(TVMModuleHandle lib, const char* dir, int device_type) {
  char path[700];
  size_t size = 0;
  snprintf(path, sizeof path, "%s/graph.json", dir);
  char* json = read_file(path, &size);
  CHECK(json != NULL, "cannot read %s", path);
  if (!json) return NULL;
  json = realloc(json, size + 1);
  json[size] = 0;
  TVMFunctionHandle create = NULL;
  OK(TVMFuncGetGlobal("tvm.graph_executor.create", &create));
  TVMValue v[4], r;
  int c[4] = {kTVMStr, kTVMModuleHandle, kDLInt, kDLInt}, rc = 0;
  v[0].v_str = json;
  v[1].v_handle = lib;
  v[2].v_int64 = device_type;
  v[3].v_int64 = 0;
  OK(call(create, v, c, 4, &r, &rc));
  CHECK(rc == kTVMModuleHandle, "create returned type code %d", rc);
  TVMFuncFree(create);
  free(json);
  return rc == kTVMModuleHandle ? r.v_handle : NULL;
}

static inline TVMModuleHandle create_from_json(TVMModuleHandle lib, const char* dir) {
  return create_from_json_on(lib, dir, kDLCPU);
}

/* share_params(src, blob): dst takes src's memory for every weight named in the params blob. */
static inline void share_params_blob(TVMModuleHandle dst, TVMModuleHandle src, const void* blob, size_t size) {
  TVMByteArray arr = {(const char*)blob, size};
  TVMValue v[2], r;
  int c[2] = {kTVMModuleHandle, kTVMBytes}, rc;
  v[0].v_handle = src;
  v[1].v_handle = &arr;
  TVMFunctionHandle f = get_fn(dst, "share_params");
  OK(call(f, v, c, 2, &r, &rc));
  TVMFuncFree(f);
}

/* Sets the fixture's inputs from arrays on `array_device` (type, id 0), runs, and compares every
 * output (the executor's array, and copies into arrays on `array_device`) with upstream's bytes. */
static inline void run_and_check_with(TVMModuleHandle gmod, const Fixture* fx, const char* how, int array_device) {
  TVMFunctionHandle set_input = get_fn(gmod, "set_input");
  TVMFunctionHandle run = get_fn(gmod, "run");
  TVMFunctionHandle get_output = get_fn(gmod, "get_output");
  TVMFunctionHandle get_num_outputs = get_fn(gmod, "get_num_outputs");
  TVMValue v[2], r;
  int c[2], rc;

  for (int i = 0; i < fx->num_inputs; i++) {
    const FixtureTensor* t = &fx->inputs[i];
    int code, bits;
    dtype_of(t->dtype, &code, &bits);
    TVMArrayHandle arr = NULL;
    OK(TVMArrayAlloc(t->shape, t->ndim, code, bits, 1, array_device, 0, &arr));
    size_t size = 0;
    void* data = read_file(t->file, &size);
    CHECK(data && (int64_t)size == num_bytes(t), "input file %s", t->file);
    OK(TVMArrayCopyFromBytes(arr, data, size));
    v[0].v_str = t->name;
    c[0] = kTVMStr;
    v[1].v_handle = arr;
    c[1] = kTVMNDArrayHandle;
    OK(call(set_input, v, c, 2, &r, &rc));
    free(data);
    OK(TVMArrayFree(arr));
  }
  OK(call(run, NULL, NULL, 0, &r, &rc));
  OK(call(get_num_outputs, NULL, NULL, 0, &r, &rc));
  CHECK(rc == kDLInt && r.v_int64 == fx->num_outputs, "%s: %d outputs, expected %d", fx->dir,
        (int)r.v_int64, fx->num_outputs);

  for (int k = 0; k < fx->num_outputs; k++) {
    const FixtureTensor* t = &fx->outputs[k];
    v[0].v_int64 = k;
    c[0] = kDLInt;
    OK(call(get_output, v, c, 1, &r, &rc));
    CHECK(rc == kTVMNDArrayHandle, "get_output returned code %d", rc);
    if (rc != kTVMNDArrayHandle) continue;
    TVMArrayHandle out = r.v_handle;
    CHECK(out->ndim == t->ndim, "%s output %d: ndim %d vs %d", fx->dir, k, out->ndim, t->ndim);
    for (int d = 0; d < t->ndim && d < out->ndim; d++)
      CHECK(out->shape[d] == t->shape[d], "%s output %d dim %d", fx->dir, k, d);
    unsigned tindex = 99;
    OK(TVMArrayGetTypeIndex(out, &tindex));
    CHECK(tindex == 2, "array type index %u", tindex);
    size_t size = 0;
    void* want = read_file(t->file, &size);
    void* got = malloc(size ? size : 1);
    OK(TVMArrayCopyToBytes(out, got, size));
    CHECK(memcmp(want, got, size) == 0, "%s (%s): output %d differs from upstream's", fx->dir, how, k);

    /* The copying form: get_output(k, array). */
    int code, bits;
    dtype_of(t->dtype, &code, &bits);
    TVMArrayHandle copy = NULL;
    OK(TVMArrayAlloc(t->shape, t->ndim, code, bits, 1, array_device, 0, &copy));
    v[1].v_handle = copy;
    c[1] = kTVMNDArrayHandle;
    OK(call(get_output, v, c, 2, &r, &rc));
    memset(got, 0, size);
    OK(TVMArrayCopyToBytes(copy, got, size));
    CHECK(memcmp(want, got, size) == 0, "%s (%s): copied output %d differs", fx->dir, how, k);
    OK(TVMArrayFree(copy));
    free(want);
    free(got);
    OK(TVMArrayFree(out));
  }
  TVMFuncFree(set_input);
  TVMFuncFree(run);
  TVMFuncFree(get_output);
  TVMFuncFree(get_num_outputs);
}

static inline void run_and_check(TVMModuleHandle gmod, const Fixture* fx, const char* how) {
  run_and_check_with(gmod, fx, how, kDLCPU);
}

#endif
