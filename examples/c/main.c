/* Runs a model TVM compiled for the graph executor, with the C API alone.
 *
 *   run_model MODEL_DIR [OTHER_BUILD_DIR...]
 *
 * MODEL_DIR holds lib.so, graph.json and params.bin (what export_library, get_graph_json and
 * save_param_dict wrote). The program asks the executor for the model's inputs beyond its weights
 * (get_input_info; get_input gives each one's shape and dtype), fills each with a fixed pattern,
 * runs, and prints every output. Each OTHER_BUILD_DIR is another build of the same network (another batch size, say):
 * its executor shares the first one's weights, one copy for all, and runs the same way. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <tvm_runtime.h>

#define CHECK(call)                                                 \
  do {                                                              \
    if ((call) != 0) {                                              \
      fprintf(stderr, "%s failed: %s\n", #call, TVMGetLastError()); \
      exit(1);                                                      \
    }                                                               \
  } while (0)

static char* slurp(const char* dir, const char* name, size_t* n) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  char* buf = malloc(*n + 1);
  if (!buf || fread(buf, 1, *n, f) != *n) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(1);
  }
  buf[*n] = 0;
  fclose(f);
  return buf;
}

/* Calls a global function (runtime.MapGetItem, ...) or, with m, one of a module's. */
static TVMValue call(TVMModuleHandle m, const char* fn, TVMValue* v, int* c, int n, int* ret_code) {
  TVMFunctionHandle f;
  TVMValue r;
  if (m) {
    CHECK(TVMModGetFunction(m, fn, 0, &f));
  } else {
    CHECK(TVMFuncGetGlobal(fn, &f));
  }
  if (!f) {
    fprintf(stderr, "no function %s\n", fn);
    exit(1);
  }
  CHECK(TVMFuncCall(f, v, c, n, &r, ret_code));
  if (m) CHECK(TVMFuncFree(f)); /* globals stay registered: their handles are not ours to free */
  return r;
}

/* A global that takes an object (and maybe an index): runtime.MapItems(map), runtime.ArrayGetItem(array, i). */
static TVMValue call_obj(const char* fn, void* obj, const int64_t* index, int* ret_code) {
  TVMValue v[2] = {{.v_handle = obj}, {.v_int64 = index ? *index : 0}};
  int c[2] = {kTVMObjectHandle, kTVMArgInt};
  return call(NULL, fn, v, c, index ? 2 : 1, ret_code);
}

static int64_t num_elements(const DLTensor* t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n * t->dtype.lanes;
}

static size_t element_bytes(DLDataType t) { return t.bits < 8 ? 1 : (size_t)t.bits / 8; }

/* Element i of a host buffer of dtype t, as a double (what printing needs). */
static double element(const void* data, DLDataType t, int64_t i) {
  switch (t.code * 1000 + t.bits) {
    case kDLFloat * 1000 + 32: return ((const float*)data)[i];
    case kDLFloat * 1000 + 64: return ((const double*)data)[i];
    case kDLInt * 1000 + 8: return ((const int8_t*)data)[i];
    case kDLInt * 1000 + 16: return ((const int16_t*)data)[i];
    case kDLInt * 1000 + 32: return ((const int32_t*)data)[i];
    case kDLInt * 1000 + 64: return (double)((const int64_t*)data)[i];
    case kDLUInt * 1000 + 1:
    case kDLUInt * 1000 + 8: return ((const uint8_t*)data)[i];
    case kDLUInt * 1000 + 16: return ((const uint16_t*)data)[i];
    case kDLUInt * 1000 + 32: return ((const uint32_t*)data)[i];
    case kDLUInt * 1000 + 64: return (double)((const uint64_t*)data)[i];
    default: return 0.0 / 0.0; /* float16 and others: printed as nan */
  }
}

/* Writes the pattern value of element i (small numbers every dtype holds). */
static void fill(void* data, DLDataType t, int64_t i) {
  double v = t.code == kDLFloat ? (double)(i % 17) / 17.0 : (double)(i % (t.bits == 1 ? 2 : 7));
  switch (t.code * 1000 + t.bits) {
    case kDLFloat * 1000 + 32: ((float*)data)[i] = (float)v; break;
    case kDLFloat * 1000 + 64: ((double*)data)[i] = v; break;
    case kDLInt * 1000 + 8: ((int8_t*)data)[i] = (int8_t)v; break;
    case kDLInt * 1000 + 16: ((int16_t*)data)[i] = (int16_t)v; break;
    case kDLInt * 1000 + 32: ((int32_t*)data)[i] = (int32_t)v; break;
    case kDLInt * 1000 + 64: ((int64_t*)data)[i] = (int64_t)v; break;
    case kDLUInt * 1000 + 16: ((uint16_t*)data)[i] = (uint16_t)v; break;
    case kDLUInt * 1000 + 32: ((uint32_t*)data)[i] = (uint32_t)v; break;
    case kDLUInt * 1000 + 64: ((uint64_t*)data)[i] = (uint64_t)v; break;
    default: ((uint8_t*)data)[i * element_bytes(t)] = (uint8_t)v; /* uint8, bool; others: zero but one byte */
  }
}

static void print_tensor(const char* label, const DLTensor* t) {
  size_t n = (size_t)num_elements(t), bytes = n * element_bytes(t->dtype);
  void* host = calloc(bytes ? bytes : 1, 1);
  CHECK(TVMArrayCopyToBytes((TVMArrayHandle)t, host, bytes));
  printf("%s [", label);
  for (int i = 0; i < t->ndim; i++) printf(i ? ",%" PRId64 : "%" PRId64, t->shape[i]);
  printf("]");
  for (size_t i = 0; i < n && i < 6; i++) printf(" %.6g", element(host, t->dtype, (int64_t)i));
  printf(n > 6 ? " ...\n" : "\n");
  free(host);
}

/* An executor for dir's graph on the CPU; the library stays alive through the executor. */
static TVMModuleHandle create(const char* dir) {
  char path[4096];
  size_t n;
  TVMModuleHandle lib;
  snprintf(path, sizeof path, "%s/lib.so", dir);
  CHECK(TVMModLoadFromFile(path, "", &lib));
  char* json = slurp(dir, "graph.json", &n);
  TVMValue v[4] = {{.v_str = json}, {.v_handle = lib}, {.v_int64 = kDLCPU}, {.v_int64 = 0}};
  int c[4] = {kTVMStr, kTVMModuleHandle, kTVMArgInt, kTVMArgInt}, rc;
  TVMValue r = call(NULL, "tvm.graph_executor.create", v, c, 4, &rc);
  CHECK(TVMModFree(lib));
  free(json);
  return r.v_handle;
}

/* The names of the model's inputs beyond its weights, which get_input_info lists once load_params
 * has said which inputs are weights. Returns how many, at most max. */
static int data_input_names(TVMModuleHandle ex, char names[][256], int max) {
  int rc, count = 0;
  void* info = call(ex, "get_input_info", NULL, NULL, 0, &rc).v_handle;
  TVMValue v[2] = {{.v_handle = info}, {.v_str = "shape"}};
  int c[2] = {kTVMObjectHandle, kTVMStr};
  void* shapes = call(NULL, "runtime.MapGetItem", v, c, 2, &rc).v_handle;
  void* items = call_obj("runtime.MapItems", shapes, NULL, &rc).v_handle; /* [key, value, key, value, ...] */
  int64_t n = call_obj("runtime.ArraySize", items, NULL, &rc).v_int64;
  for (int64_t k = 0; k < n && count < max; k += 2) {
    TVMValue key = call_obj("runtime.ArrayGetItem", items, &k, &rc);
    if (rc == kTVMStr) { /* a string comes back as one; a String object otherwise */
      snprintf(names[count++], 256, "%s", key.v_str);
      continue;
    }
    /* A returned string lives until the next call on this thread: copy it. */
    snprintf(names[count++], 256, "%s", call_obj("runtime.GetFFIString", key.v_handle, NULL, &rc).v_str);
    CHECK(TVMObjectFree(key.v_handle));
  }
  CHECK(TVMObjectFree(items));
  CHECK(TVMObjectFree(shapes));
  CHECK(TVMObjectFree(info));
  return count;
}

/* Fills each named input with the pattern, in its own shape and dtype: get_input gives the
 * executor's input tensor, which the bytes are copied into (what TVM's Python set_input does). */
static void fill_inputs(TVMModuleHandle ex, const char* label, char names[][256], int count) {
  for (int k = 0; k < count; k++) {
    TVMValue v = {.v_str = names[k]};
    int c = kTVMStr, rc;
    TVMArrayHandle x = call(ex, "get_input", &v, &c, 1, &rc).v_handle;
    int64_t n = num_elements(x);
    void* data = calloc((size_t)(n ? n : 1), element_bytes(x->dtype));
    for (int64_t i = 0; i < n; i++) fill(data, x->dtype, i);
    CHECK(TVMArrayCopyFromBytes(x, data, (size_t)n * element_bytes(x->dtype)));
    char what[32 + 8 + 256];
    snprintf(what, sizeof what, "%.31s input %.255s", label, names[k]);
    print_tensor(what, x);
    free(data);
    CHECK(TVMArrayFree(x));
  }
}

static void run_and_print(TVMModuleHandle ex, const char* label, char names[][256], int count) {
  int rc;
  fill_inputs(ex, label, names, count);
  call(ex, "run", NULL, NULL, 0, &rc);
  int64_t outputs = call(ex, "get_num_outputs", NULL, NULL, 0, &rc).v_int64;
  for (int64_t i = 0; i < outputs; i++) {
    TVMValue v = {.v_int64 = i};
    int c = kTVMArgInt;
    TVMArrayHandle out = call(ex, "get_output", &v, &c, 1, &rc).v_handle;
    char what[64];
    snprintf(what, sizeof what, "%s output %" PRId64, label, i);
    print_tensor(what, out);
    CHECK(TVMArrayFree(out));
  }
  /* What this runtime adds: the memory the executor holds, as JSON. */
  printf("%s memory: %s\n", label, call(ex, "get_memory_usage", NULL, NULL, 0, &rc).v_str);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL_DIR [OTHER_BUILD_DIR...]\n", argv[0]);
    return 2;
  }
  size_t n;
  char* params = slurp(argv[1], "params.bin", &n);
  TVMByteArray blob = {params, n};
  TVMModuleHandle first = create(argv[1]);
  TVMValue v[2] = {{.v_handle = &blob}};
  int c[2] = {kTVMBytes}, rc;
  call(first, "load_params", v, c, 1, &rc);
  static char names[64][256];
  int count = data_input_names(first, names, 64);
  run_and_print(first, "executor 0", names, count);
  for (int k = 2; k < argc; k++) {
    TVMModuleHandle other = create(argv[k]);
    /* The other build takes the first executor's weights: one copy for all. */
    v[0].v_handle = first;
    c[0] = kTVMModuleHandle;
    v[1].v_handle = &blob;
    c[1] = kTVMBytes;
    call(other, "share_params", v, c, 2, &rc);
    char label[32];
    snprintf(label, sizeof label, "executor %d", k - 1);
    run_and_print(other, label, names, count);
    CHECK(TVMModFree(other));
  }
  CHECK(TVMModFree(first));
  free(params);
  return 0;
}
