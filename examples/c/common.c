/* What the C examples share (see common.h). */
#define _POSIX_C_SOURCE 200809L /* scandir */
#include "common.h"

#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The first 8 bytes (little-endian) of TVM's params files and of the Relay VM's bytecode. */
static const uint64_t kParamsMagic = 0xF7E58D4F05049CB7ULL;
static const uint64_t kVmMagic = 0xD225DE2F4214151DULL;

char* slurp(const char* path, size_t* n) {
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

TVMValue call(TVMModuleHandle m, const char* fn, TVMValue* v, int* c, int n, int* ret_code) {
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
  if (TVMFuncCall(f, v, c, n, &r, ret_code) != 0) {
    fflush(stdout);
    fprintf(stderr, "%s: %s\n", fn, TVMGetLastError());
    exit(1);
  }
  if (m) CHECK(TVMFuncFree(f)); /* globals stay registered: their handles are not ours to free */
  return r;
}

int has_function(TVMModuleHandle m, const char* fn) {
  TVMFunctionHandle f = NULL;
  if (TVMModGetFunction(m, fn, 0, &f) != 0 || !f) return 0;
  TVMFuncFree(f);
  return 1;
}

int64_t num_elements(const DLTensor* t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n * t->dtype.lanes;
}

size_t element_bytes(DLDataType t) { return t.bits < 8 ? 1 : (size_t)t.bits / 8; }

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

void fill(void* data, DLDataType t, int64_t i) {
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

void print_tensor(const char* label, const DLTensor* t) {
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

int is_dir(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char* path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int ends_with(const char* s, const char* tail) {
  size_t a = strlen(s), b = strlen(tail);
  return a >= b && !strcmp(s + a - b, tail);
}

static int starts_with_magic(const char* path, uint64_t magic) {
  unsigned char head[8];
  FILE* f = fopen(path, "rb");
  if (!f) return 0;
  size_t got = fread(head, 1, sizeof head, f);
  fclose(f);
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = v << 8 | head[i];
  return got == sizeof head && v == magic;
}

/* The first of `names` that is a file of dir (and, with magic, starts with it). */
static int first_named(const char* dir, const char* const* names, uint64_t magic, char* out) {
  for (; *names; names++) {
    snprintf(out, 4096, "%s/%s", dir, *names);
    if (is_file(out) && (!magic || starts_with_magic(out, magic))) return 0;
  }
  return 1;
}

/* The files of dir that `keep` accepts, in name order: 0 when exactly one (into out), 1 when none,
 * -1 when several (named in a message saying what, and how to choose). */
static int only_one(const char* dir, int (*keep)(const char* path), const char* what, char* out) {
  struct dirent** entries;
  int n = scandir(dir, &entries, NULL, alphasort), found = 0;
  if (n < 0) {
    fprintf(stderr, "cannot list %s\n", dir);
    exit(1);
  }
  char path[4096], names[1024] = "";
  for (int i = 0; i < n; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, entries[i]->d_name);
    if (is_file(path) && keep(path)) {
      if (!found++) snprintf(out, 4096, "%s", path);
      size_t used = strlen(names);
      snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", entries[i]->d_name);
    }
    free(entries[i]);
  }
  free(entries);
  if (found > 1) fprintf(stderr, "%s: several %s (%s): keep one in the folder\n", dir, what, names);
  return found == 1 ? 0 : found ? -1 : 1;
}

static int is_library(const char* path) { return ends_with(path, ".so"); }

static int is_params(const char* path) {
  return !ends_with(path, ".so") && !ends_with(path, ".json") && starts_with_magic(path, kParamsMagic);
}

static int is_vm_code(const char* path) { return !ends_with(path, ".so") && starts_with_magic(path, kVmMagic); }

int folder_library(const char* dir, char* out) {
  static const char* const names[] = {"lib.so", "deploy_lib.so", "mod.so", NULL};
  return first_named(dir, names, 0, out) == 0 ? 0 : only_one(dir, is_library, "operator libraries", out);
}

int folder_graph(const char* dir, char* out) {
  static const char* const names[] = {"graph.json", "deploy_graph.json", NULL};
  return first_named(dir, names, 0, out);
}

int folder_params(const char* dir, char* out) {
  static const char* const names[] = {"params.bin", "params", "deploy_param.params", NULL};
  return first_named(dir, names, kParamsMagic, out) == 0 ? 0 : only_one(dir, is_params, "params files", out);
}

int folder_vm_code(const char* dir, char* out) { return only_one(dir, is_vm_code, "VM bytecode files", out); }
