/* Runs a Relay VM model (relay.vm.compile's artefact) with the C API alone: the executable
 * loaded, a VM made from it, each input set at the shape given (any batch, any sequence length),
 * the function invoked, and the tuple of outputs read back.
 *
 *   run_vm MODEL SHAPES [SHAPES...]
 *
 * MODEL is a folder (relay.vm.compile's two files, lib.so and code.ro, as TVM's docs save them,
 * or one .so holding both, as exported with the bytecode inside) or that .so itself. Each SHAPES
 * is one invoke on the same VM: the inputs' shapes in order, comma-separated, each optionally with
 * a dtype (float32 unless said): `3x16`, `1x5x8`, `3x16,3:int32`. Inputs are filled with a fixed
 * pattern, as run_model fills them; the executable records no input shapes, hence this argument.
 *
 *   run_vm tests/fixtures/vm/0.16/mlp_dyn 1x16 3x16    # batch 1, then batch 3, on one VM */
#define _POSIX_C_SOURCE 200809L /* strtok_r */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

#define MAX_INPUTS 16
#define MAX_DIMS 8

/* The executable: a folder's bytecode with its library, or a .so holding both. */
static TVMModuleHandle load_executable(const char* path) {
  char lib_path[4096], code_path[4096];
  TVMModuleHandle lib, exe;
  int rc;
  if (!is_dir(path)) {
    CHECK(TVMModLoadFromFile(path, "", &exe));
  } else if (folder_vm_code(path, code_path) == 0) {
    if (folder_library(path, lib_path) != 0) {
      fprintf(stderr, "%s: no lib.so (the kernels %s was compiled with)\n", path, code_path);
      exit(1);
    }
    CHECK(TVMModLoadFromFile(lib_path, "", &lib));
    size_t n;
    char* code = slurp(code_path, &n);
    TVMByteArray bytes = {code, n};
    TVMValue v[2] = {{.v_handle = &bytes}, {.v_handle = lib}};
    int c[2] = {kTVMBytes, kTVMModuleHandle};
    exe = call(NULL, "runtime.Load_Executable", v, c, 2, &rc).v_handle;
    free(code);
    CHECK(TVMModFree(lib)); /* the executable holds it */
  } else {
    if (folder_library(path, lib_path) != 0) {
      fprintf(stderr, "%s: no code.ro and no .so: not a Relay VM model folder\n", path);
      exit(1);
    }
    CHECK(TVMModLoadFromFile(lib_path, "", &exe));
  }
  if (!has_function(exe, "vm_load_executable")) {
    fprintf(stderr, "%s holds no Relay VM executable (a graph executor model? run it with run_model)\n", path);
    exit(2);
  }
  return exe;
}

/* One input's shape and dtype from "3x16" or "3x16:int32"; 0 on success. */
static int parse_input(const char* text, int64_t* shape, int* ndim, DLDataType* dtype) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", text);
  char* type = strchr(buf, ':');
  *dtype = (DLDataType){kDLFloat, 32, 1};
  if (type) {
    *type++ = 0;
    int bits;
    char kind[16];
    if (sscanf(type, "%15[a-z]%d", kind, &bits) != 2) return -1;
    dtype->bits = (uint8_t)bits;
    if (!strcmp(kind, "float")) dtype->code = kDLFloat;
    else if (!strcmp(kind, "int")) dtype->code = kDLInt;
    else if (!strcmp(kind, "uint")) dtype->code = kDLUInt;
    else return -1;
  }
  *ndim = 0;
  for (char* dim = strtok(buf, "x"); dim; dim = strtok(NULL, "x")) {
    char* end;
    long long d = strtoll(dim, &end, 10);
    if (*end || d < 0 || *ndim == MAX_DIMS) return -1;
    shape[(*ndim)++] = d;
  }
  return 0;
}

/* Prints a result: a tensor, or each field of a tuple (an ADT, nested as the model returns it). */
static void print_result(TVMValue v, int code, const char* label, int* index) {
  int rc;
  if (code == kTVMNDArrayHandle) {
    char what[64];
    snprintf(what, sizeof what, "%s output %d", label, (*index)++);
    print_tensor(what, (DLTensor*)v.v_handle);
    CHECK(TVMArrayFree((TVMArrayHandle)v.v_handle));
    return;
  }
  TVMValue a[2] = {v, {.v_int64 = 0}};
  int c[2] = {kTVMObjectHandle, kTVMArgInt};
  int64_t size = call(NULL, "runtime.GetADTSize", a, c, 1, &rc).v_int64;
  for (int64_t i = 0; i < size; i++) {
    a[1].v_int64 = i;
    TVMValue field = call(NULL, "runtime.GetADTFields", a, c, 2, &rc);
    print_result(field, rc, label, index);
  }
  CHECK(TVMObjectFree(v.v_handle));
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s MODEL SHAPES [SHAPES...]   (SHAPES: 3x16, or 3x16,3:int32 for two inputs)\n", argv[0]);
    return 2;
  }
  TVMModuleHandle exe = load_executable(argv[1]);
  int rc;
  TVMValue name = {.v_str = "main"};
  int str = kTVMStr;
  int64_t arity = call(exe, "get_function_arity", &name, &str, 1, &rc).v_int64;
  /* A VM on the CPU, its memory from pools that later invokes reuse (alloc type 2: pooled). */
  TVMModuleHandle vm = call(exe, "vm_load_executable", NULL, NULL, 0, &rc).v_handle;
  TVMValue init[3] = {{.v_int64 = kDLCPU}, {.v_int64 = 0}, {.v_int64 = 2}};
  int init_codes[3] = {kTVMArgInt, kTVMArgInt, kTVMArgInt};
  call(vm, "init", init, init_codes, 3, &rc);
  for (int k = 2; k < argc; k++) {
    int64_t shapes[MAX_INPUTS][MAX_DIMS];
    DLTensor inputs[MAX_INPUTS];
    void* data[MAX_INPUTS];
    int n = 0;
    char list[1024];
    snprintf(list, sizeof list, "%s", argv[k]);
    for (char *save, *item = strtok_r(list, ",", &save); item; item = strtok_r(NULL, ",", &save), n++) {
      DLDataType dtype;
      int ndim;
      if (n == MAX_INPUTS || parse_input(item, shapes[n], &ndim, &dtype) != 0) {
        fprintf(stderr, "%s: a shape is dims joined by x, a dtype after ':' (3x16, 3x16:int32)\n", item);
        return 2;
      }
      inputs[n] = (DLTensor){NULL, {kDLCPU, 0}, ndim, dtype, shapes[n], NULL, 0};
      int64_t count = num_elements(&inputs[n]);
      data[n] = calloc((size_t)(count ? count : 1), element_bytes(dtype));
      for (int64_t i = 0; i < count; i++) fill(data[n], dtype, i);
      inputs[n].data = data[n];
    }
    if (n != arity) {
      fprintf(stderr, "main takes %" PRId64 " inputs (", arity);
      for (int64_t i = 0; i < arity; i++) {
        TVMValue v[2] = {name, {.v_int64 = i}};
        int c[2] = {kTVMStr, kTVMArgInt};
        fprintf(stderr, "%s%s", i ? ", " : "", call(exe, "get_function_param_name", v, c, 2, &rc).v_str);
      }
      fprintf(stderr, "); %s gives %d shapes\n", argv[k], n);
      return 2;
    }
    /* set_input("main", x, ...) copies the inputs in; invoke("main") runs and returns the result. */
    TVMValue v[MAX_INPUTS + 1] = {name};
    int c[MAX_INPUTS + 1] = {kTVMStr};
    for (int i = 0; i < n; i++) {
      v[i + 1].v_handle = &inputs[i];
      c[i + 1] = kTVMDLTensorHandle;
    }
    char label[64];
    snprintf(label, sizeof label, "invoke %d", k - 1);
    for (int i = 0; i < n; i++) {
      char what[96];
      snprintf(what, sizeof what, "%s input %d", label, i);
      print_tensor(what, &inputs[i]);
    }
    call(vm, "set_input", v, c, n + 1, &rc);
    TVMValue result = call(vm, "invoke", &name, &str, 1, &rc);
    int index = 0;
    print_result(result, rc, label, &index);
    for (int i = 0; i < n; i++) free(data[i]);
  }
  CHECK(TVMModFree(vm));
  CHECK(TVMModFree(exe));
  return 0;
}
