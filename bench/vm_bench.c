/* The Relay VM under a C host, the same binary on either runtime (LD_LIBRARY_PATH): one figure per
 * process on its last line. The executable is the split form of a benchmark model
 * (scripts/make_vm_fixtures.py --bench: code.ro + lib.so), its version string replaced by
 * VM_VERSION when set (upstream's runtime refuses every string but its own).
 *
 *   vm_bench latency DIR N [ROWS]   median microseconds of set_input + invoke (case 0's input, its
 *                                   first dimension ROWS when given)
 *   vm_bench random DIR N           N invokes, the first dimension drawn in [1, 64]: prints the
 *                                   resident kB after the first 20, after all N, and the peak
 *   vm_bench vms DIR K              K VMs of one executable on VM_DEVICE (cpu, opencl), each
 *                                   invoked once: device bytes (DEVICE_BYTES=<shim>) of the first
 *                                   VM, and per VM after it, in kB
 *   vm_bench resident DIR SECONDS   loads, invokes once, prints "ready PID", sleeps (PSS is read
 *                                   from outside)
 *   vm_bench loop DIR N             the control model (x, n): one invoke running its Relay loop N
 *                                   times (a frame per iteration), in milliseconds
 *   vm_bench case DIR N K           median microseconds of set_input + invoke on the manifest's
 *                                   case K (every input, any dtype: the If and NMS models)
 * VM_MAP_CONSTANTS=FILE (this runtime): the constants mapped from FILE (tvmrt.map_constants).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <tvm/runtime/c_runtime_api.h>

#define CHECK(x)                                                              \
  do {                                                                        \
    if ((x) != 0) {                                                           \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, TVMGetLastError()); \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

static void* slurp(const char* path, size_t* n) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  *n = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  void* b = malloc(*n);
  if (fread(b, 1, *n, f) != *n) exit(1);
  fclose(f);
  return b;
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static long status_kb(const char* key) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, strlen(key))) v = atol(line + strlen(key) + 1);
  if (f) fclose(f);
  return v;
}

static TVMFunctionHandle fn(TVMModuleHandle m, const char* name) {
  TVMFunctionHandle f = NULL;
  CHECK(TVMModGetFunction(m, name, 0, &f));
  return f;
}

/* The executable of DIR: code.ro with its version replaced by VM_VERSION, and lib.so. */
static TVMModuleHandle load_executable(const char* dir) {
  char path[1024];
  size_t n;
  snprintf(path, sizeof path, "%s/code.ro", dir);
  char* code = slurp(path, &n);
  const char* version = getenv("VM_VERSION");
  if (version) {
    uint64_t old_len;
    memcpy(&old_len, code + 8, 8);
    uint64_t len = strlen(version);
    size_t rest = n - 16 - old_len;
    char* patched = malloc(16 + len + rest);
    memcpy(patched, code, 8);
    memcpy(patched + 8, &len, 8);
    memcpy(patched + 16, version, len);
    memcpy(patched + 16 + len, code + 16 + old_len, rest);
    free(code);
    code = patched;
    n = 16 + len + rest;
  }
  snprintf(path, sizeof path, "%s/lib.so", dir);
  TVMModuleHandle lib;
  CHECK(TVMModLoadFromFile(path, "so", &lib));
  TVMFunctionHandle load;
  CHECK(TVMFuncGetGlobal("runtime.Load_Executable", &load));
  TVMByteArray bytes = {code, n};
  TVMValue v[2], r;
  int codes[2] = {kTVMBytes, kTVMModuleHandle}, rc;
  v[0].v_handle = &bytes;
  v[1].v_handle = lib;
  CHECK(TVMFuncCall(load, v, codes, 2, &r, &rc));
  free(code);
  return r.v_handle;
}

static int device_type(void) {
  const char* d = getenv("VM_DEVICE");
  return d && !strcmp(d, "opencl") ? kDLOpenCL : kDLCPU;
}

static TVMModuleHandle make_vm(TVMModuleHandle exe) {
  TVMValue r, v[6];
  int rc, codes[6] = {kDLInt, kDLInt, kDLInt, kDLInt, kDLInt, kDLInt};
  CHECK(TVMFuncCall(fn(exe, "vm_load_executable"), NULL, NULL, 0, &r, &rc));
  TVMModuleHandle vm = r.v_handle;
  int n = 0;
  v[n++].v_int64 = device_type();
  v[n++].v_int64 = 0;
  v[n++].v_int64 = 2;
  if (device_type() != kDLCPU) {
    v[n++].v_int64 = kDLCPU;
    v[n++].v_int64 = 0;
    v[n++].v_int64 = 2;
  }
  CHECK(TVMFuncCall(fn(vm, "init"), v, codes, n, &r, &rc));
  return vm;
}

/* Case 0's input of DIR (one float32 input), its first dimension `rows` when > 0. */
static DLTensor input(const char* dir, int64_t rows, int64_t* shape, int* ndim) {
  char path[1024], line[512];
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  FILE* f = fopen(path, "r");
  char file[256] = "";
  *ndim = 0;
  while (f && fgets(line, sizeof line, f)) {
    if (strncmp(line, "input ", 6) || *ndim) continue;
    strtok(line, " ");
    strtok(NULL, " ");
    strtok(NULL, " ");
    *ndim = atoi(strtok(NULL, " "));
    for (int i = 0; i < *ndim; i++) shape[i] = atoll(strtok(NULL, " "));
    snprintf(file, sizeof file, "%s", strtok(NULL, " \n"));
  }
  if (f) fclose(f);
  if (rows > 0) shape[0] = rows;
  int64_t count = 1;
  for (int i = 0; i < *ndim; i++) count *= shape[i];
  float* data = calloc(count, sizeof(float));
  for (int64_t i = 0; i < count; i++) data[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
  DLTensor t = {data, {kDLCPU, 0}, *ndim, {kDLFloat, 32, 1}, shape, NULL, 0};
  return t;
}

/* The inputs of the manifest's case K of DIR, in order, read from their files. */
typedef struct {
  int count;
  DLTensor t[8];
  int64_t shape[8][8];
} Case;

static DLDataType dtype_of(const char* name) {
  DLDataType t = {kDLFloat, 32, 1};
  if (!strncmp(name, "int", 3)) t.code = kDLInt, t.bits = (uint8_t)atoi(name + 3);
  else if (!strncmp(name, "uint", 4)) t.code = kDLUInt, t.bits = (uint8_t)atoi(name + 4);
  else if (!strncmp(name, "float", 5)) t.bits = (uint8_t)atoi(name + 5);
  return t;
}

static void read_case(const char* dir, int k, Case* c) {
  char path[1024], line[512];
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  FILE* f = fopen(path, "r");
  int at = -1;
  c->count = 0;
  while (f && fgets(line, sizeof line, f)) {
    if (!strncmp(line, "case ", 5)) at = atoi(line + 5);
    if (at != k || strncmp(line, "input ", 6) || c->count == 8) continue;
    DLTensor* t = &c->t[c->count];
    int64_t* shape = c->shape[c->count++];
    strtok(line, " ");
    strtok(NULL, " ");
    DLDataType dtype = dtype_of(strtok(NULL, " "));
    int ndim = atoi(strtok(NULL, " "));
    for (int i = 0; i < ndim; i++) shape[i] = atoll(strtok(NULL, " "));
    snprintf(path, sizeof path, "%s/%s", dir, strtok(NULL, " \n"));
    size_t n;
    DLTensor x = {slurp(path, &n), {kDLCPU, 0}, ndim, dtype, shape, NULL, 0};
    *t = x;
  }
  if (f) fclose(f);
  if (!c->count) {
    fprintf(stderr, "%s: no case %d\n", dir, k);
    exit(1);
  }
}

/* set_input of main's `count` (at most 8) inputs `x`, then invoke; the result freed. */
static void invoke_with(TVMFunctionHandle set_input, TVMFunctionHandle inv, DLTensor* x, int count) {
  TVMValue v[9], r;
  int codes[9], rc;
  codes[0] = kTVMStr;
  v[0].v_str = "main";
  for (int i = 0; i < count; i++) {
    codes[i + 1] = kTVMDLTensorHandle;
    v[i + 1].v_handle = &x[i];
  }
  CHECK(TVMFuncCall(set_input, v, codes, count + 1, &r, &rc));
  CHECK(TVMFuncCall(inv, v, codes, 1, &r, &rc));
  if (rc == kTVMNDArrayHandle) TVMArrayFree(r.v_handle);
  else if (rc == kTVMObjectHandle) TVMObjectFree(r.v_handle);
}

/* Median microseconds of `n` invokes with inputs `x` (after 3 to warm up). */
static double median_us(TVMFunctionHandle set_input, TVMFunctionHandle inv, DLTensor* x, int count, int n) {
  for (int i = 0; i < 3; i++) invoke_with(set_input, inv, x, count);
  double* t = malloc(n * sizeof(double));
  for (int i = 0; i < n; i++) {
    double s = now_us();
    invoke_with(set_input, inv, x, count);
    t[i] = now_us() - s;
  }
  qsort(t, n, sizeof(double), cmp);
  double median = t[n / 2];
  free(t);
  return median;
}

static size_t device_bytes(void) {
  const char* shim = getenv("DEVICE_BYTES");
  if (!shim) return 0;
  void* h = dlopen(shim, RTLD_NOW | RTLD_NOLOAD);
  size_t (*live)(void) = h ? (size_t(*)(void))dlsym(h, "tvm_rt_cl_shim_live_bytes") : NULL;
  return live ? live() : 0;
}

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  const char *mode = argv[1], *dir = argv[2];
  int n = atoi(argv[3]);
  TVMModuleHandle exe = load_executable(dir);
  const char* mapped = getenv("VM_MAP_CONSTANTS");
  if (mapped) { /* this runtime's: the constants from one aligned file every process maps */
    TVMValue v, r;
    int code = kTVMStr, rc;
    v.v_str = mapped;
    CHECK(TVMFuncCall(fn(exe, "tvmrt.map_constants"), &v, &code, 1, &r, &rc));
  }
  if (!strcmp(mode, "vms")) {
    size_t before = device_bytes(), first = 0;
    int64_t shape[8];
    int ndim;
    DLTensor x = input(dir, 0, shape, &ndim);
    for (int k = 0; k < n; k++) {
      TVMModuleHandle vm = make_vm(exe);
      invoke_with(fn(vm, "set_input"), fn(vm, "invoke"), &x, 1);
      if (k == 0) first = device_bytes() - before;
    }
    size_t all = device_bytes() - before;
    printf("%.1f %.1f\n", first / 1024.0, n > 1 ? (all - first) / 1024.0 / (n - 1) : 0.0);
    return 0;
  }
  TVMModuleHandle vm = make_vm(exe);
  TVMFunctionHandle set_input = fn(vm, "set_input"), inv = fn(vm, "invoke");
  int64_t shape[8];
  int ndim;
  if (!strcmp(mode, "latency")) {
    DLTensor x = input(dir, argc > 4 ? atoll(argv[4]) : 0, shape, &ndim);
    printf("%.2f\n", median_us(set_input, inv, &x, 1, n));
  } else if (!strcmp(mode, "case")) {
    static Case c;
    read_case(dir, argc > 4 ? atoi(argv[4]) : 0, &c);
    printf("%.2f\n", median_us(set_input, inv, c.t, c.count, n));
  } else if (!strcmp(mode, "random")) {
    unsigned seed = 7;
    long warm = 0;
    for (int i = 0; i < n; i++) {
      seed = seed * 1103515245u + 12345u;
      DLTensor x = input(dir, 1 + (seed >> 16) % 64, shape, &ndim);
      invoke_with(set_input, inv, &x, 1);
      free(x.data);
      if (i == 19) warm = status_kb("VmRSS:");
    }
    printf("%ld %ld %ld\n", warm, status_kb("VmRSS:"), status_kb("VmHWM:"));
  } else if (!strcmp(mode, "loop")) {
    float x[4] = {0};
    int32_t count = n;
    int64_t four = 4;
    DLTensor in[2] = {{x, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &four, NULL, 0},
                      {&count, {kDLCPU, 0}, 0, {kDLInt, 32, 1}, NULL, NULL, 0}};
    TVMValue v[3], r;
    int codes[3] = {kTVMStr, kTVMDLTensorHandle, kTVMDLTensorHandle}, rc;
    v[0].v_str = "main";
    v[1].v_handle = &in[0];
    v[2].v_handle = &in[1];
    CHECK(TVMFuncCall(set_input, v, codes, 3, &r, &rc));
    double s = now_us();
    CHECK(TVMFuncCall(inv, v, codes, 1, &r, &rc));
    double took = now_us() - s;
    if (rc == kTVMObjectHandle) TVMObjectFree(r.v_handle);
    printf("%.1f\n", took / 1000.0);
  } else if (!strcmp(mode, "resident")) {
    DLTensor x = input(dir, 0, shape, &ndim);
    invoke_with(set_input, inv, &x, 1);
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    sleep(n);
  }
  return 0;
}
