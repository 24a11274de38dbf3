/* Runs a VM model with the C API alone: a Relay VM executable (relay.vm.compile's artefact, TVM
 * 0.8-0.19) or a Relax one (relax.build / tvm.compile + export_library, TVM 0.19-0.27): the
 * executable loaded, a VM made from it, each input set at the shape given (any batch, any sequence
 * length), the function invoked, and the tuple of outputs read back. Both VMs answer the same
 * calls (vm_load_executable, init, set_input, invoke), so nothing here asks which it is.
 *
 *   run_vm MODEL [SHAPES...]
 *
 * MODEL is a folder (relay.vm.compile's two files, lib.so and code.ro, as TVM's docs save them,
 * or one .so holding both, as exported with the bytecode inside; a Relax model's one .so) or that
 * .so itself. Each SHAPES
 * is one invoke on the same VM: the inputs' shapes in order, comma-separated, each optionally with
 * a dtype: `3x16`, `1x5x8`, `3x16,3:int32`; `scalar` is a 0-d input (`3x16,scalar:int64`).
 * Inputs are filled with a fixed pattern, as run_model fills them.
 * The executable records no input shapes. A folder's model.meta (as the tvmrt tool and the package
 * read it: {"Model": {"Inputs": [{"name", "dtype", "shape"}...]}}, -1 along an open axis) does:
 * then each SHAPES is checked against it, an input's dtype defaults to the recorded one, and with
 * no SHAPES at all a model whose recorded shapes are all fixed runs once at them. Without it, the
 * dtype is float32 unless said.
 *
 *   run_vm tests/fixtures/vm/0.16/mlp_dyn 1x16 3x16    # batch 1, then batch 3, on one VM
 *   run_vm tests/fixtures/relax/0.27/mlp_bound/model.so 2x16 5x16 */
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
      fprintf(stderr, "%s: no code.ro and no .so: not a VM model folder\n", path);
      exit(1);
    }
    CHECK(TVMModLoadFromFile(lib_path, "", &exe));
  }
  if (!has_function(exe, "vm_load_executable")) {
    fprintf(stderr, "%s holds no VM executable, Relay or Relax (a graph executor model? run it with run_model)\n", path);
    exit(2);
  }
  return exe;
}

/* What model.meta records of one input. */
typedef struct {
  char name[128];
  char dtype[32];
  DLDataType type;
  int ndim;
  int64_t shape[MAX_DIMS]; /* -1: any size */
} Recorded;

/* A dtype's name (float32, int64, uint8, bool, float16, bfloat16) as a DLDataType; 0 on success. */
static int parse_dtype(const char* text, DLDataType* dtype) {
  int bits;
  char kind[16];
  *dtype = (DLDataType){kDLFloat, 32, 1};
  if (!strcmp(text, "bool")) {
    *dtype = (DLDataType){kDLUInt, 1, 1};
    return 0;
  }
  if (sscanf(text, "%15[a-z]%d", kind, &bits) != 2 || bits <= 0 || bits > 64) return -1;
  dtype->bits = (uint8_t)bits;
  if (!strcmp(kind, "float")) dtype->code = kDLFloat;
  else if (!strcmp(kind, "int")) dtype->code = kDLInt;
  else if (!strcmp(kind, "uint")) dtype->code = kDLUInt;
  else if (!strcmp(kind, "bfloat")) dtype->code = kDLBfloat;
  else return -1;
  return 0;
}

/* The JSON string after `key` within [at, end), into out; a pointer past it, or NULL. */
static const char* json_string(const char* at, const char* end, const char* key, char* out, size_t cap) {
  const char* k = strstr(at, key);
  if (!k || k >= end) return NULL;
  const char* q = strchr(k + strlen(key), '"');
  if (!q || q >= end) return NULL;
  const char* close = strchr(q + 1, '"');
  if (!close || close >= end || (size_t)(close - q - 1) >= cap) return NULL;
  memcpy(out, q + 1, (size_t)(close - q - 1));
  out[close - q - 1] = 0;
  return close + 1;
}

/* The inputs model.meta records, at most MAX_INPUTS: their count, 0 when the folder has no such
 * file, -1 (a message printed) when it cannot be read. A small reader of what the tools write, not
 * a JSON parser: each input is an object with "name", "dtype" and "shape". */
static int read_meta(const char* dir, Recorded* out) {
  char path[4096];
  snprintf(path, sizeof path, "%s/model.meta", dir);
  if (!is_dir(dir)) return 0;
  FILE* f = fopen(path, "rb");
  if (!f) return 0;
  fclose(f);
  size_t n;
  char* text = slurp(path, &n);
  const char* at = strstr(text, "\"Inputs\"");
  int count = 0;
  while (at && count < MAX_INPUTS) {
    const char* open = strchr(at, '{');
    const char* outputs = strstr(at, "\"Outputs\"");
    if (!open || (outputs && open > outputs)) break;
    const char* close = strchr(open, '}');
    if (!close) break;
    Recorded* r = &out[count];
    const char* shape = strstr(open, "\"shape\"");
    if (!json_string(open, close, "\"name\"", r->name, sizeof r->name) ||
        !json_string(open, close, "\"dtype\"", r->dtype, sizeof r->dtype) || parse_dtype(r->dtype, &r->type) != 0 ||
        !shape || shape > close) {
      fprintf(stderr, "%s: input %d is not {\"name\": ..., \"dtype\": ..., \"shape\": [...]}\n", path, count);
      free(text);
      return -1;
    }
    const char* p = strchr(shape, '[');
    r->ndim = 0;
    for (p = p ? p + 1 : close; p < close && *p != ']';) {
      char* next;
      long long d = strtoll(p, &next, 10);
      if (next == p) {
        p++; /* a comma or whitespace */
        continue;
      }
      if (r->ndim == MAX_DIMS) break;
      r->shape[r->ndim++] = d;
      p = next;
    }
    count++;
    at = close + 1;
  }
  free(text);
  return count;
}

/* "float32 [-1,16]" */
static void describe(const Recorded* r, char* out, size_t cap) {
  size_t used = (size_t)snprintf(out, cap, "%s [", r->dtype);
  for (int d = 0; d < r->ndim && used < cap; d++) used += (size_t)snprintf(out + used, cap - used, d ? ",%" PRId64 : "%" PRId64, r->shape[d]);
  if (used < cap) snprintf(out + used, cap - used, "]");
}

/* One input's shape and dtype from "3x16", "3x16:int32", "scalar" or "scalar:int64"; 0 on
 * success. The dtype is `fallback` unless said. */
static int parse_input(const char* text, int64_t* shape, int* ndim, DLDataType* dtype, DLDataType fallback) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", text);
  char* type = strchr(buf, ':');
  *dtype = fallback;
  if (type) {
    *type++ = 0;
    if (parse_dtype(type, dtype) != 0) return -1;
  }
  *ndim = 0;
  if (!strcmp(buf, "scalar")) return 0;
  for (char* dim = strtok(buf, "x"); dim; dim = strtok(NULL, "x")) {
    char* end;
    long long d = strtoll(dim, &end, 10);
    if (*end || d < 0 || *ndim == MAX_DIMS) return -1;
    shape[(*ndim)++] = d;
  }
  return 0;
}

/* Prints a result: a tensor, or each field of a tuple, nested as the model returns it (the Relay
 * VM's tuples are ADTs, the Relax VM's arrays). */
static void print_result(TVMValue v, int code, const char* label, int* index) {
  int rc;
  if (code == kTVMNDArrayHandle) {
    char what[64];
    snprintf(what, sizeof what, "%s output %d", label, (*index)++);
    print_tensor(what, (DLTensor*)v.v_handle);
    CHECK(TVMArrayFree((TVMArrayHandle)v.v_handle));
    return;
  }
  unsigned type_index;
  char* key;
  CHECK(TVMObjectGetTypeIndex(v.v_handle, &type_index));
  CHECK(TVMObjectTypeIndex2Key(type_index, &key));
  int adt = !strcmp(key, "runtime.ADT");
  TVMValue a[2] = {v, {.v_int64 = 0}};
  int c[2] = {kTVMObjectHandle, kTVMArgInt};
  int64_t size = call(NULL, adt ? "runtime.GetADTSize" : "runtime.ArraySize", a, c, 1, &rc).v_int64;
  for (int64_t i = 0; i < size; i++) {
    a[1].v_int64 = i;
    TVMValue field = call(NULL, adt ? "runtime.GetADTFields" : "runtime.ArrayGetItem", a, c, 2, &rc);
    print_result(field, rc, label, index);
  }
  CHECK(TVMObjectFree(v.v_handle));
}

/* A function of the executable, else of the VM (the Relay VM's executable describes its
 * functions, the Relax VM itself). */
static TVMValue ask(TVMModuleHandle exe, TVMModuleHandle vm, const char* fn, TVMValue* v, int* c, int n) {
  int rc;
  return call(has_function(exe, fn) ? exe : vm, fn, v, c, n, &rc);
}

/* The inputs of one invoke from its SHAPES (or, with none, the recorded shapes): 0, or 2 with a
 * message naming the input and the shape it takes. */
static int make_inputs(const char* spec, const Recorded* meta, int recorded, int64_t shapes[][MAX_DIMS],
                       DLTensor* inputs, void** data, int* count) {
  int n = 0;
  char list[1024];
  snprintf(list, sizeof list, "%s", spec ? spec : "");
  char *save, *item = spec ? strtok_r(list, ",", &save) : NULL;
  for (; spec ? item != NULL : n < recorded; n++) {
    DLDataType dtype = n < recorded ? meta[n].type : (DLDataType){kDLFloat, 32, 1};
    int ndim = 0;
    if (n == MAX_INPUTS) {
      fprintf(stderr, "at most %d inputs\n", MAX_INPUTS);
      return 2;
    }
    if (spec) {
      if (parse_input(item, shapes[n], &ndim, &dtype, dtype) != 0) {
        fprintf(stderr, "%s: a shape is dims joined by x, a dtype after ':' (3x16, 3x16:int32, scalar:int64)\n", item);
        return 2;
      }
    } else {
      ndim = meta[n].ndim;
      memcpy(shapes[n], meta[n].shape, sizeof(int64_t) * (size_t)ndim);
    }
    if (n < recorded) { /* what model.meta says this input takes */
      const Recorded* r = &meta[n];
      int fits = ndim == r->ndim && dtype.code == r->type.code && dtype.bits == r->type.bits;
      for (int d = 0; fits && d < ndim; d++) fits = r->shape[d] < 0 || r->shape[d] == shapes[n][d];
      for (int d = 0; !spec && d < ndim; d++) fits = fits && r->shape[d] >= 0;
      if (!fits) {
        char want[256];
        describe(r, want, sizeof want);
        if (spec) {
          fprintf(stderr, "input %d (%s) takes %s (model.meta); %s does not fit\n", n, r->name, want, item);
        } else {
          fprintf(stderr, "input %d (%s) takes %s (model.meta): give the shapes to run at, e.g. ", n, r->name, want);
          for (int i = 0; i < recorded; i++) {
            fprintf(stderr, i ? "," : "");
            for (int d = 0; d < meta[i].ndim; d++) fprintf(stderr, "%s%" PRId64, d ? "x" : "", meta[i].shape[d] < 0 ? 1 : meta[i].shape[d]);
            if (meta[i].ndim == 0) fprintf(stderr, "scalar");
          }
          fprintf(stderr, "\n");
        }
        return 2;
      }
    }
    inputs[n] = (DLTensor){NULL, {kDLCPU, 0}, ndim, dtype, shapes[n], NULL, 0};
    int64_t elements = num_elements(&inputs[n]);
    data[n] = calloc((size_t)(elements ? elements : 1), element_bytes(dtype));
    for (int64_t i = 0; i < elements; i++) fill(data[n], dtype, i);
    inputs[n].data = data[n];
    if (spec) item = strtok_r(NULL, ",", &save);
  }
  *count = n;
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr,
            "usage: %s MODEL [SHAPES...]   (SHAPES: 3x16, or 3x16,3:int32 for two inputs, scalar for a 0-d one; "
            "none: the shapes the folder's model.meta records)\n",
            argv[0]);
    return 2;
  }
  Recorded meta[MAX_INPUTS];
  int recorded = read_meta(argv[1], meta);
  if (recorded < 0) return 1;
  TVMModuleHandle exe = load_executable(argv[1]);
  int rc;
  TVMValue name = {.v_str = "main"};
  int str = kTVMStr;
  /* A VM on the CPU, its memory from pools that later invokes reuse (alloc type 2: pooled). */
  TVMModuleHandle vm = call(exe, "vm_load_executable", NULL, NULL, 0, &rc).v_handle;
  TVMValue init[3] = {{.v_int64 = kDLCPU}, {.v_int64 = 0}, {.v_int64 = 2}};
  int init_codes[3] = {kTVMArgInt, kTVMArgInt, kTVMArgInt};
  call(vm, "init", init, init_codes, 3, &rc);
  int64_t arity = ask(exe, vm, "get_function_arity", &name, &str, 1).v_int64;
  if (recorded && recorded != arity) {
    fprintf(stderr, "%s/model.meta records %d inputs, but main takes %" PRId64 ": not this model's\n", argv[1], recorded, arity);
    return 1;
  }
  if (argc == 2 && !recorded) {
    fprintf(stderr, "%s records no input shapes (no model.meta): give them, e.g. %s %s 1x16\n", argv[1], argv[0], argv[1]);
    return 2;
  }
  for (int k = 2; k < argc || (k == 2 && argc == 2); k++) {
    int64_t shapes[MAX_INPUTS][MAX_DIMS];
    DLTensor inputs[MAX_INPUTS];
    void* data[MAX_INPUTS] = {NULL};
    int n = 0;
    const char* spec = k < argc ? argv[k] : NULL;
    if (make_inputs(spec, meta, recorded, shapes, inputs, data, &n) != 0) return 2;
    if (n != arity) {
      fprintf(stderr, "main takes %" PRId64 " inputs (", arity);
      for (int64_t i = 0; i < arity; i++) {
        TVMValue v[2] = {name, {.v_int64 = i}};
        int c[2] = {kTVMStr, kTVMArgInt};
        fprintf(stderr, "%s%s", i ? ", " : "", ask(exe, vm, "get_function_param_name", v, c, 2).v_str);
      }
      fprintf(stderr, "); %s gives %d shapes\n", spec, n);
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
