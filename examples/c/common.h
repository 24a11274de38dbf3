/* What the C examples share: calling packed functions, filling and printing tensors, and finding
 * a model folder's files by the rules the tvmrt tool and the Python package use. */
#ifndef TVMRT_EXAMPLES_COMMON_H
#define TVMRT_EXAMPLES_COMMON_H
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <tvm_runtime.h>

/* A C API call that must succeed, else the program stops with TVM's message. */
#define CHECK(call)                                                 \
  do {                                                              \
    if ((call) != 0) {                                              \
      fflush(stdout);                                               \
      fprintf(stderr, "%s failed: %s\n", #call, TVMGetLastError()); \
      exit(1);                                                      \
    }                                                               \
  } while (0)

/* A whole file, NUL-terminated; exits with a message when it cannot be read. */
char* slurp(const char* path, size_t* n);

/* Calls a global function (runtime.MapGetItem, ...) or, with m, one of a module's; exits with
 * TVM's message on an error. */
TVMValue call(TVMModuleHandle m, const char* fn, TVMValue* v, int* c, int n, int* ret_code);
/* Whether module m has a function of that name. */
int has_function(TVMModuleHandle m, const char* fn);

int64_t num_elements(const DLTensor* t);
size_t element_bytes(DLDataType t);
/* Writes the pattern value of element i: (i mod 17) / 17 for floats (float16 and bfloat16 too), i mod 7
 * for integers, i mod 2 for bool. */
void fill(void* data, DLDataType t, int64_t i);
/* "label [shape] v0 v1 ... v5 ...": the tensor copied to the host and its first values. */
void print_tensor(const char* label, const DLTensor* t);

/* A model folder's files, or NULL (paths of at most 4096 bytes, into the caller's buffers).
 * library: lib.so, deploy_lib.so, mod.so, else the folder's one .so (several: an error naming them).
 * graph: graph.json, deploy_graph.json.
 * params: params.bin, params, deploy_param.params, else the one file of any name (not .so or
 *   .json) starting with TVM's params magic number (several: an error naming them).
 * vm_code: a file (not .so) starting with the Relay VM bytecode's magic (relay.vm.compile's code.ro).
 * Each returns 0 when found, 1 when there is none, -1 (a message printed) when it cannot choose. */
int folder_library(const char* dir, char* out);
int folder_graph(const char* dir, char* out);
int folder_params(const char* dir, char* out);
int folder_vm_code(const char* dir, char* out);
int is_dir(const char* path);

#endif
