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

/* IEEE half precision (float16) and bfloat16 to and from float, by their bits: C11 has no type for
 * either. Rounding to nearest, ties to even; the pattern's values are exact in both anyway. */
static float half_to_float(uint16_t h) {
  uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, frac = h & 0x3ff, bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | frac << 13; /* infinity, NaN */
  } else if (exp != 0) {
    bits = sign | (exp + 112) << 23 | frac << 13;
  } else if (frac == 0) {
    bits = sign;
  } else { /* subnormal: normalise */
    int e = -1;
    do {
      frac <<= 1;
      e++;
    } while (!(frac & 0x400));
    bits = sign | (uint32_t)(112 - e) << 23 | (frac & 0x3ff) << 13;
  }
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static uint16_t float_to_half(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  uint16_t sign = (uint16_t)((bits >> 16) & 0x8000);
  int32_t exp = (int32_t)((bits >> 23) & 0xff) - 127 + 15;
  uint32_t frac = bits & 0x7fffff;
  if (((bits >> 23) & 0xff) == 0xff) return sign | 0x7c00 | (frac ? 0x200 : 0);
  if (exp >= 0x1f) return sign | 0x7c00;
  if (exp <= 0) {
    if (exp < -10) return sign;
    frac |= 0x800000;
    uint32_t shift = (uint32_t)(14 - exp), half = frac >> shift, rest = frac & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rest > mid || (rest == mid && (half & 1))) half++;
    return sign | (uint16_t)half;
  }
  uint16_t h = sign | (uint16_t)(exp << 10) | (uint16_t)(frac >> 13);
  uint32_t rest = frac & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++;
  return h;
}

static float bf16_to_float(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

static uint16_t float_to_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7fffffff) > 0x7f800000) return (uint16_t)((bits >> 16) | 0x40); /* NaN stays NaN */
  return (uint16_t)((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

/* Element i of a host buffer of dtype t, as a double (what printing needs). */
static double element(const void* data, DLDataType t, int64_t i) {
  switch (t.code * 1000 + t.bits) {
    case kDLFloat * 1000 + 16: return half_to_float(((const uint16_t*)data)[i]);
    case kDLBfloat * 1000 + 16: return bf16_to_float(((const uint16_t*)data)[i]);
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
    default: return 0.0 / 0.0; /* a dtype C cannot read (custom types): printed as nan */
  }
}

void fill(void* data, DLDataType t, int64_t i) {
  int is_float = t.code == kDLFloat || t.code == kDLBfloat;
  double v = is_float ? (double)(i % 17) / 17.0 : (double)(i % (t.bits == 1 ? 2 : 7));
  switch (t.code * 1000 + t.bits) {
    case kDLFloat * 1000 + 16: ((uint16_t*)data)[i] = float_to_half((float)v); break;
    case kDLBfloat * 1000 + 16: ((uint16_t*)data)[i] = float_to_bf16((float)v); break;
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
