/* Loads the batch-1 and batch-8 builds of one MLP, shares the weights between the two executors,
 * runs both and prints their outputs and the memory each holds.
 * usage: share_example MODEL_B1_DIR MODEL_B8_DIR */
#include <stdio.h>
#include <stdlib.h>
#include <tvm_runtime.h>

#define CHECK(call)                                                          \
  do {                                                                       \
    if ((call) != 0) {                                                       \
      fprintf(stderr, "%s failed: %s\n", #call, TVMGetLastError());          \
      exit(1);                                                               \
    }                                                                        \
  } while (0)

static char* slurp(const char* dir, const char* name, size_t* n) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE* f = fopen(path, "rb");
  if (!f) { fprintf(stderr, "cannot open %s\n", path); exit(1); }
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  char* buf = malloc(*n + 1);
  if (fread(buf, 1, *n, f) != *n) exit(1);
  buf[*n] = 0;
  fclose(f);
  return buf;
}

static TVMValue call(TVMModuleHandle m, const char* fn, TVMValue* v, int* c, int n, int* ret_code) {
  TVMFunctionHandle f;
  TVMValue r;
  CHECK(TVMModGetFunction(m, fn, 0, &f));
  CHECK(TVMFuncCall(f, v, c, n, &r, ret_code));
  CHECK(TVMFuncFree(f));
  return r;
}

/* An executor for dir's graph on the CPU; the library stays alive through the executor. */
static TVMModuleHandle create(const char* dir) {
  char path[1024];
  size_t n;
  TVMModuleHandle lib;
  snprintf(path, sizeof path, "%s/lib.so", dir);
  CHECK(TVMModLoadFromFile(path, "", &lib));
  char* json = slurp(dir, "graph.json", &n);
  TVMFunctionHandle create;
  CHECK(TVMFuncGetGlobal("tvm.graph_executor.create", &create));
  TVMValue v[4], r;
  int c[4] = {kTVMStr, kTVMModuleHandle, kTVMArgInt, kTVMArgInt}, rc;
  v[0].v_str = json;
  v[1].v_handle = lib;
  v[2].v_int64 = kDLCPU;
  v[3].v_int64 = 0;
  CHECK(TVMFuncCall(create, v, c, 4, &r, &rc));
  CHECK(TVMFuncFree(create));
  CHECK(TVMModFree(lib));
  free(json);
  return r.v_handle;
}

static void run_and_print(TVMModuleHandle ex, const char* label, int64_t batch) {
  int64_t shape[4] = {batch, 1, 28, 28};
  TVMArrayHandle x;
  CHECK(TVMArrayAlloc(shape, 4, kDLFloat, 32, 1, kDLCPU, 0, &x));
  float* data = malloc(sizeof(float) * batch * 784);
  for (int i = 0; i < batch * 784; i++) data[i] = (float)(i % 17) / 17.0f;
  CHECK(TVMArrayCopyFromBytes(x, data, sizeof(float) * batch * 784));
  TVMValue v[2];
  int c[2] = {kTVMStr, kTVMNDArrayHandle}, rc;
  v[0].v_str = "data";
  v[1].v_handle = x;
  call(ex, "set_input", v, c, 2, &rc);
  call(ex, "run", NULL, NULL, 0, &rc);
  v[0].v_int64 = 0;
  c[0] = kTVMArgInt;
  TVMValue out = call(ex, "get_output", v, c, 1, &rc);
  float* probs = malloc(sizeof(float) * batch * 10);
  CHECK(TVMArrayCopyToBytes(out.v_handle, probs, sizeof(float) * batch * 10));
  printf("%s output[0]:", label);
  for (int i = 0; i < 10; i++) printf(" %.4f", probs[i]);
  TVMValue mem = call(ex, "get_memory_usage", NULL, NULL, 0, &rc);
  printf("\n%s memory: %s\n", label, mem.v_str); /* the string lives until the next call */
  CHECK(TVMArrayFree(out.v_handle));
  CHECK(TVMArrayFree(x));
  free(probs);
  free(data);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s MODEL_B1_DIR MODEL_B8_DIR\n", argv[0]);
    return 2;
  }
  size_t n;
  char* params = slurp(argv[1], "params.bin", &n);
  TVMByteArray blob = {params, n};
  TVMModuleHandle b1 = create(argv[1]), b8 = create(argv[2]);
  TVMValue v[2];
  int c[2], rc;
  v[0].v_handle = &blob;
  c[0] = kTVMBytes;
  call(b1, "load_params", v, c, 1, &rc);
  v[0].v_handle = b1; /* batch 8 takes batch 1's weights: one copy for both */
  c[0] = kTVMModuleHandle;
  v[1].v_handle = &blob;
  c[1] = kTVMBytes;
  call(b8, "share_params", v, c, 2, &rc);
  run_and_print(b1, "batch 1", 1);
  run_and_print(b8, "batch 8", 8);
  CHECK(TVMModFree(b1));
  CHECK(TVMModFree(b8));
  free(params);
  return 0;
}
