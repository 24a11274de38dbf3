/* Runs a model TVM compiled for the graph executor, with the C API alone.
 *
 *   run_model MODEL [OTHER_BUILD...]
 *
 * MODEL is a model folder or an export_library file. A folder is read as the tvmrt tool and the
 * Python package read it (common.h): the library (lib.so, deploy_lib.so, mod.so or its one .so),
 * the graph (graph.json, deploy_graph.json, else the one the library carries: export_library of
 * relay.build's result, the default since TVM 0.8) and the weights (params.bin, params,
 * deploy_param.params or any one file in TVM's params format; else those the library carries). A
 * Relay VM folder is sent to run_vm. The program asks the executor for the model's inputs beyond
 * its weights (get_input_info; get_input gives each one's shape and dtype), fills each with a fixed
 * pattern, runs, and prints every output. Each OTHER_BUILD is another build of the same network
 * (another batch size, say): its executor shares the first one's weights (named by either
 * build's params file), one copy for all, and runs the same way. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

/* A global that takes an object (and maybe an index): runtime.MapItems(map), runtime.ArrayGetItem(array, i). */
static TVMValue call_obj(const char* fn, void* obj, const int64_t* index, int* ret_code) {
  TVMValue v[2] = {{.v_handle = obj}, {.v_int64 = index ? *index : 0}};
  int c[2] = {kTVMObjectHandle, kTVMArgInt};
  return call(NULL, fn, v, c, index ? 2 : 1, ret_code);
}

/* An executor of one build on the CPU, its params file (if any) read into *params and, with load,
 * loaded (else its library's own weights, if it binds any). The library stays alive through the
 * executor. */
static TVMModuleHandle open_build(const char* path, TVMByteArray* params, int load) {
  char lib_path[4096], graph_path[4096], params_path[4096];
  int has_graph = 1, has_params = 1, rc;
  params->data = NULL;
  params->size = 0;
  if (is_dir(path)) {
    if (folder_vm_code(path, lib_path) == 0) {
      fprintf(stderr, "%s is a Relay VM model (%s is its bytecode): run it with run_vm\n", path, lib_path);
      exit(2);
    }
    int found = folder_library(path, lib_path);
    if (found != 0) {
      if (found == 1) fprintf(stderr, "no operator library in %s: no lib.so, deploy_lib.so, mod.so or other .so\n", path);
      exit(1);
    }
    has_graph = folder_graph(path, graph_path) == 0;
    int p = folder_params(path, params_path);
    if (p < 0) exit(1);
    has_params = p == 0;
  } else {
    FILE* f = fopen(path, "rb");
    if (!f) {
      fprintf(stderr, "no model at %s (a model folder or an export_library file)\n", path);
      exit(1);
    }
    fclose(f);
    snprintf(lib_path, sizeof lib_path, "%s", path); /* an export_library file: graph and weights inside */
    has_graph = has_params = 0;
  }
  TVMModuleHandle lib, ex;
  CHECK(TVMModLoadFromFile(lib_path, "", &lib));
  if (has_function(lib, "vm_load_executable")) {
    fprintf(stderr, "%s holds a Relay VM executable: run it with run_vm\n", lib_path);
    exit(2);
  }
  /* The library's graph executor factory (relay.build's result exported whole) carries the graph
   * and, unless they were kept out, the weights: used when the folder gives no graph, or a graph
   * but no weights. */
  int factory = has_function(lib, "default") && (!has_graph || !has_params);
  if (factory) {
    TVMValue v[2] = {{.v_int64 = kDLCPU}, {.v_int64 = 0}};
    int c[2] = {kTVMArgInt, kTVMArgInt};
    ex = call(lib, "default", v, c, 2, &rc).v_handle;
  } else if (has_graph) {
    size_t n;
    char* json = slurp(graph_path, &n);
    TVMValue v[4] = {{.v_str = json}, {.v_handle = lib}, {.v_int64 = kDLCPU}, {.v_int64 = 0}};
    int c[4] = {kTVMStr, kTVMModuleHandle, kTVMArgInt, kTVMArgInt};
    ex = call(NULL, "tvm.graph_executor.create", v, c, 4, &rc).v_handle;
    free(json);
  } else {
    fprintf(stderr,
            "%s: no graph.json or deploy_graph.json, and %s carries no graph (no graph executor factory): keep "
            "relay.build's graph JSON beside the library\n",
            path, lib_path);
    exit(1);
  }
  CHECK(TVMModFree(lib));
  if (has_params) {
    size_t n;
    params->data = slurp(params_path, &n);
    params->size = n;
    if (load) {
      TVMValue v = {.v_handle = params};
      int c = kTVMBytes;
      call(ex, "load_params", &v, &c, 1, &rc);
    }
  }
  printf("%s: library %s, graph %s, weights %s\n", path, lib_path, factory || !has_graph ? "in the library" : graph_path,
         has_params ? params_path : factory ? "in the library" : "none (every graph input is data)");
  return ex;
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
    fprintf(stderr, "usage: %s MODEL [OTHER_BUILD...]  (a model folder or an export_library file)\n", argv[0]);
    return 2;
  }
  TVMByteArray blob;
  TVMModuleHandle first = open_build(argv[1], &blob, 1);
  static char names[64][256];
  int count = data_input_names(first, names, 64), rc;
  run_and_print(first, "executor 0", names, count);
  for (int k = 2; k < argc; k++) {
    TVMByteArray own;
    TVMModuleHandle other = open_build(argv[k], &own, 0);
    /* The other build takes the first executor's weights, one copy for all: share_params reads
     * which they are from a params blob's names (either build's file; a build without one keeps
     * the weights its library binds). */
    TVMByteArray* named = blob.data ? &blob : own.data ? &own : NULL;
    if (named) {
      TVMValue v[2] = {{.v_handle = first}, {.v_handle = named}};
      int c[2] = {kTVMModuleHandle, kTVMBytes};
      call(other, "share_params", v, c, 2, &rc);
    }
    free((void*)own.data);
    char label[32];
    snprintf(label, sizeof label, "executor %d", k - 1);
    run_and_print(other, label, names, count);
    CHECK(TVMModFree(other));
  }
  CHECK(TVMModFree(first));
  free((void*)blob.data);
  return 0;
}
