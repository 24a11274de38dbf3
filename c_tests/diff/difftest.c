/* The differential test's host: runs a seeded random sequence of C API calls (the executor's
 * function table with edge arguments, NDArray copies and views, module and registry queries) on
 * whichever libtvm_runtime.so the loader finds, and prints what a host can observe, one line per
 * call: return code, error class, values, shapes, dtypes, a hash of the bytes, and which handles
 * and data pointers are ones seen before. scripts/difftest.sh runs it on this library and on
 * upstream's, each in its own process, and compares the transcripts.
 *
 * Known differences (docs/DIFFERENCES.md) are not generated: calls upstream answers by crashing
 * (null handles), writes through a view of a weight, share_params where upstream's use-count
 * check refuses, params blobs cut inside a tensor, get_output_index. The data pointer of an array
 * of a weight is not compared either (a copy here).
 *
 * usage: difftest FIXTURES_DIR SEED STEPS [KINDS]
 *   KINDS: the executors to make, digits of MakeExec's kinds (default 0123).
 * The whole message of each error goes to stderr; DIFFTEST_KEPT=1 also prints there, after each
 * step, a hash of every array kept so far: the first step where the two runtimes' memory differs. */
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tvm/runtime/c_runtime_api.h>

static uint64_t rng_state;
static uint64_t Next(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}
static int Pick(int n) { return (int)(Next() % (uint64_t)n); }

/* ---- What is printed. ---- */

/* The error class: the first word of TVMGetLastError's message, as Python's FFI maps it. */
static void PrintError(void) {
  const char* msg = TVMGetLastError();
  size_t n = strcspn(msg, ": \n");
  printf(" err=%.*s", (int)n, msg);
  /* The whole message goes to stderr, for reading a difference (the class alone is compared). */
  fprintf(stderr, "%s\n", msg);
}

static uint64_t Hash(const void* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ ((const uint8_t*)data)[i]) * 1099511628211ull;
  return h;
}

static size_t Bytes(const DLTensor* t) {
  size_t n = (t->dtype.bits * t->dtype.lanes + 7) / 8;
  for (int i = 0; i < t->ndim; ++i) n *= (size_t)t->shape[i];
  return n;
}

/* The name of an array's memory among those the same call (executor, function, key) returned
 * before: whether a view shows the same memory each time is what hosts rely on. Which entries
 * share memory with which differs by design (this library lays activations out by liveness,
 * upstream by the graph's storage ids: docs/DIFFERENCES.md), so names are not compared across
 * calls. An empty array has no memory to name. */
static char site[128];
#define MAX_SITES 512
static struct {
  char key[128];
  const void* seen[16];
  int n;
} sites[MAX_SITES];
static int n_sites;
static int SiteId(const void* p);
static int DataId(const DLTensor* a) {
  if (Bytes(a) == 0) return -1;
  return SiteId((char*)a->data + a->byte_offset);
}
/* The same for the array object itself (upstream hands out an entry's array, the same object, on
 * every call): offset from its memory's names so the two never collide. */
static int HandleId(const DLTensor* a) { return SiteId((const char*)a + 1); }
static int SiteId(const void* p) {
  int k = 0;
  while (k < n_sites && strcmp(sites[k].key, site) != 0) ++k;
  if (k == n_sites) {
    if (n_sites == MAX_SITES) return -2;
    snprintf(sites[n_sites].key, sizeof sites[n_sites].key, "%s", site);
    sites[n_sites++].n = 0;
  }
  for (int i = 0; i < sites[k].n; ++i)
    if (sites[k].seen[i] == p) return i;
  if (sites[k].n == 16) return -2;
  sites[k].seen[sites[k].n] = p;
  return sites[k].n++;
}

/* Arrays are named by their data pointer: upstream hands out the same array object for an entry
 * every time, this library a new view of the same memory (docs/DIFFERENCES.md). */
static void PrintArray(TVMArrayHandle a) {
  int array_id = HandleId(a), data_id = DataId(a);
  printf(" array#%d data#%d shape=[", array_id, data_id);
  for (int i = 0; i < a->ndim; ++i) printf(i ? ",%lld" : "%lld", (long long)a->shape[i]);
  printf("] dtype=%d:%d:%d bytes=%016llx", a->dtype.code, a->dtype.bits, a->dtype.lanes,
         (unsigned long long)Hash((char*)a->data + a->byte_offset, Bytes(a)));
}

/* Arrays handed out by the library are kept until the end, so later views of them are checked
 * (and so a freed handle's address is never seen again as a new one). */
#define MAX_KEPT 4096
static TVMArrayHandle kept[MAX_KEPT];
static int n_kept;
static int kept_writable[MAX_KEPT];
/* Arrays no step uses again, freed at the end too: freeing earlier would let a later allocation
 * reuse the address and read as an array seen before. */
static TVMArrayHandle held[MAX_KEPT];
static int n_held;
static void Hold(TVMArrayHandle a) {
  if (n_held < MAX_KEPT) held[n_held++] = a;
  else TVMArrayFree(a);
}
/* Whether the next array kept may be written through: not a view of a weight, which upstream
 * shares between executors and this library copies on write (docs/DIFFERENCES.md). */
static int next_writable = 1;
static void Keep(TVMArrayHandle a) {
  if (n_kept < MAX_KEPT) {
    printf(" kept#%d", n_kept);
    kept_writable[n_kept] = next_writable;
    kept[n_kept++] = a;
  } else {
    TVMArrayFree(a);
  }
  next_writable = 1;
}

static void PrintResult(int rc, TVMValue v, int code) {
  printf(" rc=%d", rc);
  if (rc != 0) {
    PrintError();
    return;
  }
  switch (code) {
    case kTVMNullptr: printf(" None"); break;
    case kDLInt: printf(" int=%lld", (long long)v.v_int64); break;
    case kDLFloat: printf(" float=%g", v.v_float64); break;
    case kTVMStr: printf(" str=%s", v.v_str); break;
    case kTVMNDArrayHandle: PrintArray((TVMArrayHandle)v.v_handle); Keep((TVMArrayHandle)v.v_handle); break;
    case kTVMObjectHandle: {
      unsigned index = 0;
      TVMObjectGetTypeIndex(v.v_handle, &index);
      printf(" object type=%u", index);
      TVMObjectFree(v.v_handle);
      break;
    }
    case kTVMModuleHandle: printf(" module"); TVMModFree(v.v_handle); break;
    case kTVMPackedFuncHandle: printf(" function"); TVMFuncFree(v.v_handle); break;
    default: printf(" code=%d", code); break;
  }
}

/* ---- Fixtures. ---- */

static char* ReadFile(const char* path, size_t* size) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* buf = malloc(n + 1);
  if (fread(buf, 1, n, f) != (size_t)n) n = 0;
  buf[n] = 0;
  fclose(f);
  *size = (size_t)n;
  return buf;
}

typedef struct {
  const char* name;
  int64_t shape[4];
  int ndim;
  DLDataType dtype;
} Input;

/* An executor under test, and what the generator knows of its model. */
typedef struct {
  const char* model;
  char label[32]; /* model#index, how the transcript names it */
  TVMModuleHandle mod;
  /* The host viewed a weight or shared weights in: upstream's share_params into it then fails. */
  int weights_held;
  int num_inputs, num_outputs;
  Input inputs[8];
  char* params;
  size_t params_size;
} Exec;

#define MAX_EXECS 6
static Exec execs[MAX_EXECS];
static int n_execs;
static TVMModuleHandle libs[4];
static const char* fixtures;

static const DLDataType kF32 = {kDLFloat, 32, 1}, kI32 = {kDLInt, 32, 1}, kU8 = {kDLUInt, 8, 1};

static const char* kAliasGraph =
    "{\"nodes\":[{\"op\":\"null\",\"name\":\"w\",\"inputs\":[]},{\"op\":\"null\",\"name\":\"x\",\"inputs\":[]},"
    "{\"op\":\"tvm_op\",\"name\":\"n0\",\"attrs\":{\"func_name\":\"__nop\",\"num_inputs\":\"1\",\"num_outputs\":\"1\","
    "\"flatten_data\":\"0\"},\"inputs\":[[0,0,0]]},"
    "{\"op\":\"tvm_op\",\"name\":\"n1\",\"attrs\":{\"func_name\":\"__copy\",\"num_inputs\":\"1\",\"num_outputs\":\"1\","
    "\"flatten_data\":\"0\"},\"inputs\":[[0,0,0]]},"
    "{\"op\":\"tvm_op\",\"name\":\"n2\",\"attrs\":{\"func_name\":\"__nop\",\"num_inputs\":\"1\",\"num_outputs\":\"1\","
    "\"flatten_data\":\"0\"},\"inputs\":[[1,0,0]]},"
    "{\"op\":\"tvm_op\",\"name\":\"n3\",\"attrs\":{\"func_name\":\"__copy\",\"num_inputs\":\"1\",\"num_outputs\":\"1\","
    "\"flatten_data\":\"0\"},\"inputs\":[[1,0,0]]}],"
    "\"arg_nodes\":[0,1],\"heads\":[[2,0,0],[3,0,0],[4,0,0],[5,0,0]],\"node_row_ptr\":[0,1,2,3,4,5,6],"
    "\"attrs\":{\"dltype\":[\"list_str\",[\"float32\",\"float32\",\"float32\",\"float32\",\"float32\",\"float32\"]],"
    "\"shape\":[\"list_shape\",[[16],[16],[16],[16],[16],[16]]],\"storage_id\":[\"list_int\",[0,1,0,2,1,3]]}}";

static TVMArrayHandle MakeArray(const int64_t* shape, int ndim, DLDataType dtype);

static int CallGlobal(const char* name, TVMValue* args, int* codes, int n, TVMValue* rv, int* rc_code) {
  TVMFunctionHandle f = NULL;
  if (TVMFuncGetGlobal(name, &f) != 0 || !f) return -1;
  int rc = TVMFuncCall(f, args, codes, n, rv, rc_code);
  TVMFuncFree(f);
  return rc;
}

static int CallMod(TVMModuleHandle m, const char* name, TVMValue* args, int* codes, int n, TVMValue* rv,
                   int* rc_code) {
  TVMFunctionHandle f = NULL;
  if (TVMModGetFunction(m, name, 0, &f) != 0 || !f) {
    *rc_code = kTVMNullptr;
    return -2;
  }
  int rc = TVMFuncCall(f, args, codes, n, rv, rc_code);
  TVMFuncFree(f);
  return rc;
}

static TVMModuleHandle Load(const char* model) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s/lib.so", fixtures, model);
  TVMModuleHandle m = NULL;
  if (TVMModLoadFromFile(path, "so", &m) != 0) {
    fprintf(stderr, "cannot load %s: %s\n", path, TVMGetLastError());
    exit(2);
  }
  return m;
}

/* Makes an executor: 0 the MLP's factory, 1 the unbound MLP through create, 2 the alias graph,
 * 3 multi_io's factory. */
static void MakeExec(int kind) {
  if (n_execs == MAX_EXECS) return;
  Exec* e = &execs[n_execs];
  memset(e, 0, sizeof *e);
  TVMValue args[4], rv;
  int codes[4], rc_code;
  int rc;
  char path[1024];
  if (kind == 0 || kind == 3) {
    e->model = kind == 0 ? "mlp_b1" : "multi_io";
    args[0].v_device = (DLDevice){kDLCPU, 0};
    codes[0] = kDLDevice;
    rc = CallMod(libs[kind], "default", args, codes, 1, &rv, &rc_code);
  } else {
    size_t size;
    char* json;
    if (kind == 1) {
      e->model = "mlp_unbound_b1";
      snprintf(path, sizeof path, "%s/mlp_unbound_b1/graph.json", fixtures);
      json = ReadFile(path, &size);
    } else {
      e->model = "alias";
      json = strdup(kAliasGraph);
    }
    args[0].v_str = json;
    codes[0] = kTVMStr;
    args[1].v_handle = libs[kind];
    codes[1] = kTVMModuleHandle;
    args[2].v_int64 = kDLCPU;
    codes[2] = kDLInt;
    args[3].v_int64 = 0;
    codes[3] = kDLInt;
    rc = CallGlobal("tvm.graph_executor.create", args, codes, 4, &rv, &rc_code);
    free(json);
  }
  snprintf(e->label, sizeof e->label, "%s#%d", e->model, n_execs);
  printf("make %s rc=%d", e->label, rc);
  if (rc != 0) {
    PrintError();
    printf("\n");
    return;
  }
  printf("\n");
  e->mod = rv.v_handle;
  if (kind == 0 || kind == 1) {
    e->num_inputs = 1;
    e->num_outputs = 1;
    e->inputs[0] = (Input){"data", {1, 1, 28, 28}, 4, kF32};
    snprintf(path, sizeof path, "%s/%s/params.bin", fixtures, e->model);
    e->params = ReadFile(path, &e->params_size);
  } else if (kind == 2) {
    e->num_inputs = 2;
    e->num_outputs = 4;
    e->inputs[0] = (Input){"w", {16}, 1, kF32};
    e->inputs[1] = (Input){"x", {16}, 1, kF32};
    /* A params blob holding w, made by the library under test itself. */
    TVMArrayHandle w = NULL;
    int64_t shape[1] = {16};
    TVMArrayAlloc(shape, 1, kDLFloat, 32, 1, kDLCPU, 0, &w);
    float vals[16];
    for (int i = 0; i < 16; ++i) vals[i] = (float)(i + 1);
    TVMArrayCopyFromBytes(w, vals, sizeof vals);
    TVMValue a[2];
    int c[2];
    a[0].v_str = "w";
    c[0] = kTVMStr;
    a[1].v_handle = w;
    c[1] = kTVMNDArrayHandle;
    TVMValue map;
    int map_code;
    if (CallGlobal("runtime.Map", a, c, 2, &map, &map_code) == 0) {
      TVMValue blob;
      int blob_code;
      if (CallGlobal("runtime.SaveParams", &map, &map_code, 1, &blob, &blob_code) == 0 && blob_code == kTVMBytes) {
        TVMByteArray* b = blob.v_handle;
        e->params = malloc(b->size);
        memcpy(e->params, b->data, b->size);
        e->params_size = b->size;
      }
      TVMObjectFree(map.v_handle);
    }
    TVMArrayFree(w);
  } else {
    e->num_inputs = 3;
    e->num_outputs = 7;
    e->inputs[0] = (Input){"x", {2, 3}, 2, kF32};
    e->inputs[1] = (Input){"y", {2, 3}, 2, kI32};
    e->inputs[2] = (Input){"z", {4}, 1, kU8};
    snprintf(path, sizeof path, "%s/multi_io/params.bin", fixtures);
    e->params = ReadFile(path, &e->params_size);
  }
  n_execs++;
  /* Every input gets bytes before anything runs (upstream's memory starts uninitialised, so a
   * run on unset inputs or weights has no defined result to compare). */
  for (int i = 0; i < e->num_inputs; ++i) {
    TVMArrayHandle a = MakeArray(e->inputs[i].shape, e->inputs[i].ndim, e->inputs[i].dtype);
    args[0].v_str = e->inputs[i].name;
    codes[0] = kTVMStr;
    args[1].v_handle = a;
    codes[1] = kTVMNDArrayHandle;
    CallMod(e->mod, "set_input", args, codes, 2, &rv, &rc_code);
    TVMArrayFree(a);
  }
  if (e->params) {
    TVMByteArray blob = {e->params, e->params_size};
    args[0].v_handle = &blob;
    codes[0] = kTVMBytes;
    CallMod(e->mod, "load_params", args, codes, 1, &rv, &rc_code);
  }
  /* And outputs have been computed once (upstream's start uninitialised too). */
  CallMod(e->mod, "run", NULL, NULL, 0, &rv, &rc_code);
}

/* ---- Arguments. ---- */

/* A fresh array of `shape` and `dtype`, filled with seeded bytes (finite floats). */
static TVMArrayHandle MakeArray(const int64_t* shape, int ndim, DLDataType dtype) {
  TVMArrayHandle a = NULL;
  if (TVMArrayAlloc(shape, ndim, dtype.code, dtype.bits, dtype.lanes, kDLCPU, 0, &a) != 0) return NULL;
  size_t n = Bytes(a);
  uint8_t* bytes = a->data;
  if (dtype.code == kDLFloat && dtype.bits == 32) {
    for (size_t i = 0; i + 4 <= n; i += 4) {
      float f = (float)(Pick(2001) - 1000) / 250.0f;
      memcpy(bytes + i, &f, 4);
    }
  } else {
    for (size_t i = 0; i < n; ++i) bytes[i] = (uint8_t)Pick(256);
  }
  return a;
}

/* An array for input `in`: matching, another shape of its byte size, another dtype of its byte
 * size, one element short, or (for zero-copy) the matching one. */
static TVMArrayHandle ArgFor(const Input* in, int variant, const char** what) {
  int64_t total = 1;
  for (int i = 0; i < in->ndim; ++i) total *= in->shape[i];
  int64_t flat[2] = {1, total};
  int64_t shorter[1] = {total > 1 ? total - 1 : 2};
  switch (variant) {
    case 1: *what = "flat"; return MakeArray(flat, 2, in->dtype);
    case 2:
      *what = "other-dtype";
      if (in->dtype.bits == 32) return MakeArray(in->shape, in->ndim, in->dtype.code == kDLFloat ? kI32 : kF32);
      return MakeArray(in->shape, in->ndim, in->dtype);
    case 3: *what = "short"; return MakeArray(shorter, 1, in->dtype);
    default: *what = "match"; return MakeArray(in->shape, in->ndim, in->dtype);
  }
}

/* ---- Steps. ---- */

static void KeyArg(Exec* e, TVMValue* v, int* code, int count, const char** names, int n_names) {
  int k = Pick(6);
  if (k < 3 && n_names > 0) {
    v->v_str = names[Pick(n_names)];
    *code = kTVMStr;
    printf(" key=%s", v->v_str);
  } else if (k == 3) {
    v->v_str = "no_such_name";
    *code = kTVMStr;
    printf(" key=no_such_name");
  } else {
    int choices[4] = {0, count - 1, count, -1};
    v->v_int64 = choices[Pick(4)];
    *code = kDLInt;
    printf(" key=%lld", (long long)v->v_int64);
  }
  (void)e;
}

static void StepSetInput(Exec* e, int zero_copy) {
  const char* names[8];
  for (int i = 0; i < e->num_inputs; ++i) names[i] = e->inputs[i].name;
  TVMValue args[2], rv;
  int codes[2], rc_code;
  printf("%s %s", zero_copy ? "set_input_zero_copy" : "set_input", e->label);
  KeyArg(e, &args[0], &codes[0], e->num_inputs, names, e->num_inputs);
  int which = 0;
  if (codes[0] == kTVMStr) {
    for (int i = 0; i < e->num_inputs; ++i)
      if (strcmp(args[0].v_str, e->inputs[i].name) == 0) which = i;
  } else if (args[0].v_int64 >= 0 && args[0].v_int64 < e->num_inputs) {
    which = (int)args[0].v_int64;
  }
  const char* what;
  TVMArrayHandle a = ArgFor(&e->inputs[which], zero_copy ? 0 : Pick(4), &what);
  printf(" value=%s", what);
  args[1].v_handle = a;
  codes[1] = kTVMNDArrayHandle;
  int rc = CallMod(e->mod, zero_copy ? "set_input_zero_copy" : "set_input", args, codes, 2, &rv, &rc_code);
  PrintResult(rc, rv, rc_code);
  /* Zero-copy memory must outlive the binding. */
  Keep(a);
  printf("\n");
}

static void StepGet(Exec* e, int output) {
  const char* names[8];
  for (int i = 0; i < e->num_inputs; ++i) names[i] = e->inputs[i].name;
  TVMValue args[2], rv;
  int codes[2], rc_code;
  printf("%s %s", output ? "get_output" : "get_input", e->label);
  if (output) {
    int choices[4] = {0, e->num_outputs - 1, e->num_outputs, -1};
    args[0].v_int64 = choices[Pick(4)];
    codes[0] = kDLInt;
    printf(" key=%lld", (long long)args[0].v_int64);
  } else {
    KeyArg(e, &args[0], &codes[0], e->num_inputs, names, e->num_inputs);
  }
  /* Weights: the alias graph's w (input 0, and output 0, its __nop), and every input past the
   * data of the models with bound ones. */
  int alias_w = strcmp(e->model, "alias") == 0 && codes[0] == kDLInt && args[0].v_int64 == 0;
  int weight = output ? alias_w
                      : (codes[0] == kTVMStr && strcmp(args[0].v_str, "w") == 0) || alias_w ||
                            (codes[0] == kDLInt && args[0].v_int64 >= e->num_inputs);
  next_writable = !weight;
  if (codes[0] == kTVMStr) snprintf(site, sizeof site, "%d:%d:%s", (int)(e - execs), output, args[0].v_str);
  else snprintf(site, sizeof site, "%d:%d:%lld", (int)(e - execs), output, (long long)args[0].v_int64);
  int rc = CallMod(e->mod, output ? "get_output" : "get_input", args, codes, 1, &rv, &rc_code);
  if (weight) e->weights_held = 1;
  if (weight && rc == 0 && rc_code == kTVMNDArrayHandle) {
    /* A weight's view is a copy here, its own memory upstream: compare its bytes only. */
    TVMArrayHandle a = rv.v_handle;
    printf(" rc=0 weight bytes=%016llx\n", (unsigned long long)Hash((char*)a->data + a->byte_offset, Bytes(a)));
    Hold(a);
    next_writable = 1;
    return;
  }
  PrintResult(rc, rv, rc_code);
  printf("\n");
}

static void StepSimple(Exec* e, const char* fn) {
  TVMValue rv;
  int rc_code;
  printf("%s %s", fn, e->label);
  int rc = CallMod(e->mod, fn, NULL, NULL, 0, &rv, &rc_code);
  PrintResult(rc, rv, rc_code);
  printf("\n");
}

static void StepLoadParams(Exec* e) {
  if (!e->params) return;
  TVMValue args[1], rv;
  int codes[1], rc_code;
  /* Cut inside the header only: upstream may accept a blob cut inside the last tensor's data and
   * load part of it, where this library refuses (docs/DIFFERENCES.md). */
  size_t cut = Pick(4) == 0 ? (size_t)Pick(24) : e->params_size;
  TVMByteArray blob = {e->params, cut};
  args[0].v_handle = &blob;
  codes[0] = kTVMBytes;
  printf("load_params %s bytes=%zu/%zu", e->label, cut, e->params_size);
  int rc = CallMod(e->mod, "load_params", args, codes, 1, &rv, &rc_code);
  PrintResult(rc, rv, rc_code);
  printf("\n");
}

static void StepShareParams(Exec* e) {
  Exec* other = &execs[Pick(n_execs)];
  if (!e->params || strcmp(other->model, e->model) != 0 || other == e) return;
  /* Upstream refuses to share a weight the host holds a view of (its use count is not 1), which
   * the alias graph's get_input("w") steps make likely; this library shares (docs/DIFFERENCES.md). */
  if (strcmp(e->model, "alias") == 0) return;
  /* Upstream refuses to share into an executor a factory made (the factory holds its weights too)
   * and leaves it unable to run; this library shares (docs/DIFFERENCES.md). */
  if (strcmp(e->model, "mlp_b1") == 0 || strcmp(e->model, "multi_io") == 0) return;
  /* Likewise once the host holds a view of one of its weights, or it shares them already (as
   * the source of an earlier share_params too). */
  if (e->weights_held) return;
  e->weights_held = 1;
  other->weights_held = 1;
  TVMValue args[2], rv;
  int codes[2], rc_code;
  TVMByteArray blob = {e->params, e->params_size};
  args[0].v_handle = other->mod;
  codes[0] = kTVMModuleHandle;
  args[1].v_handle = &blob;
  codes[1] = kTVMBytes;
  printf("share_params %s from executor %d", e->label, (int)(other - execs));
  int rc = CallMod(e->mod, "share_params", args, codes, 2, &rv, &rc_code);
  PrintResult(rc, rv, rc_code);
  printf("\n");
}

/* A fresh array shaped as output `index` (flat: one dimension of its element count), found by
 * asking the library for the output; NULL when it has none. */
static TVMArrayHandle ArrayForOutput(Exec* e, int index, int flat) {
  TVMValue arg, rv;
  int code = kDLInt, rc_code;
  arg.v_int64 = index;
  if (CallMod(e->mod, "get_output", &arg, &code, 1, &rv, &rc_code) != 0) return NULL;
  TVMArrayHandle view = rv.v_handle;
  int64_t elements[1] = {1};
  for (int i = 0; i < view->ndim; ++i) elements[0] *= view->shape[i];
  TVMArrayHandle out = flat ? MakeArray(elements, 1, view->dtype) : MakeArray(view->shape, view->ndim, view->dtype);
  Hold(view);
  return out;
}

static void StepCopyOutput(Exec* e) {
  TVMValue args[2], rv;
  int codes[2], rc_code;
  int index = Pick(e->num_outputs);
  int wrong = Pick(3) == 0;
  TVMArrayHandle out = ArrayForOutput(e, index, wrong);
  if (!out) return;
  args[0].v_int64 = index;
  codes[0] = kDLInt;
  args[1].v_handle = out;
  codes[1] = kTVMNDArrayHandle;
  printf("get_output_into %s index=%d target=%s", e->label, index, wrong ? "flat" : "match");
  int rc = CallMod(e->mod, "get_output", args, codes, 2, &rv, &rc_code);
  PrintResult(rc, rv, rc_code);
  if (rc == 0) printf(" out=%016llx", (unsigned long long)Hash(out->data, Bytes(out)));
  printf("\n");
  Hold(out);
}

static void StepZeroCopyOutput(Exec* e) {
  TVMValue args[2], rv;
  int codes[2], rc_code;
  int index = Pick(e->num_outputs);
  TVMArrayHandle out = ArrayForOutput(e, index, 0);
  if (!out) return;
  args[0].v_int64 = index;
  codes[0] = kDLInt;
  args[1].v_handle = out;
  codes[1] = kTVMNDArrayHandle;
  printf("set_output_zero_copy %s index=%d", e->label, index);
  int rc = CallMod(e->mod, "set_output_zero_copy", args, codes, 2, &rv, &rc_code);
  PrintResult(rc, rv, rc_code);
  Keep(out);
  printf("\n");
}

/* Writes seeded bytes through an array the library handed out earlier (a view of an executor's
 * own memory), as Python's set_input does. */
static void StepWriteView(void) {
  if (n_kept == 0) return;
  int k = Pick(n_kept);
  if (!kept_writable[k]) return;
  TVMArrayHandle a = kept[k];
  size_t n = Bytes(a);
  uint8_t* bytes = malloc(n ? n : 1);
  for (size_t i = 0; i < n; ++i) bytes[i] = (uint8_t)(Pick(64) + 32);
  int short_by = Pick(4) == 0;
  int rc = TVMArrayCopyFromBytes(a, bytes, n - (short_by && n ? 1 : 0));
  printf("copy_from_bytes kept#%d size=%s rc=%d", k, short_by ? "short" : "exact", rc);
  if (rc != 0) PrintError();
  printf("\n");
  free(bytes);
}

static void StepArrayCopy(void) {
  if (n_kept < 2) return;
  int k = Pick(n_kept);
  int j = Pick(n_kept);
  TVMArrayHandle from = kept[j], to = kept[k];
  if (!kept_writable[k]) return;
  int rc = TVMArrayCopyFromTo(from, to, NULL);
  printf("array_copy kept#%d to kept#%d rc=%d", j, k, rc);
  if (rc != 0) PrintError();
  printf("\n");
}

static void StepIndex(Exec* e) {
  TVMValue args[1], rv;
  int codes[1], rc_code;
  /* get_input_index only: upstream 0.16's executor has no get_output_index (docs/DIFFERENCES.md). */
  const char* fn = "get_input_index";
  const char* names[3] = {e->inputs[0].name, "no_such_name", "x"};
  args[0].v_str = names[Pick(3)];
  codes[0] = kTVMStr;
  printf("%s %s key=%s", fn, e->label, args[0].v_str);
  int rc = CallMod(e->mod, fn, args, codes, 1, &rv, &rc_code);
  PrintResult(rc, rv, rc_code);
  printf("\n");
}

static void StepGlobal(void) {
  int k = Pick(4);
  if (k == 0) {
    const char* keys[4] = {"runtime.NDArray", "runtime.Module", "runtime.Object", "no.such.Type"};
    unsigned index = 0;
    const char* key = keys[Pick(4)];
    int rc = TVMObjectTypeKey2Index(key, &index);
    printf("type_key2index %s rc=%d", key, rc);
    if (rc == 0) printf(" index=%u", index);
    else PrintError();
  } else if (k == 1) {
    unsigned indices[4] = {2, 7, 11, 100000};
    unsigned index = indices[Pick(4)];
    char* key = NULL;
    int rc = TVMObjectTypeIndex2Key(index, &key);
    printf("type_index2key %u rc=%d", index, rc);
    if (rc == 0) {
      printf(" key=%s", key);
      free(key);
    } else {
      PrintError();
    }
  } else if (k == 2) {
    TVMFunctionHandle f = NULL;
    const char* names[3] = {"tvm.graph_executor.create", "runtime.SaveParams", "no.such.function"};
    const char* name = names[Pick(3)];
    int rc = TVMFuncGetGlobal(name, &f);
    printf("get_global %s rc=%d found=%d", name, rc, f != NULL);
    if (f) TVMFuncFree(f);
  } else {
    int64_t shape[2] = {Pick(3), Pick(3) + 1};
    DLDataType dtypes[3] = {kF32, kI32, kU8};
    TVMArrayHandle a = MakeArray(shape, 2, dtypes[Pick(3)]);
    snprintf(site, sizeof site, "alloc");
    printf("array_alloc");
    if (a) {
      PrintArray(a);
      Keep(a);
    }
  }
  printf("\n");
}

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: difftest FIXTURES_DIR SEED STEPS [KINDS]\n");
    return 2;
  }
  const char* kinds = argc == 5 ? argv[4] : "0123";
  int n_kinds = (int)strlen(kinds);
  setvbuf(stdout, NULL, _IOLBF, 0);
  fixtures = argv[1];
  rng_state = strtoull(argv[2], NULL, 10) * 2654435761ull + 88172645463325252ull;
  int steps = atoi(argv[3]);
  int trace_kept = getenv("DIFFTEST_KEPT") != NULL;
  libs[0] = Load("mlp_b1");
  libs[1] = Load("mlp_unbound_b1");
  libs[2] = libs[0];
  libs[3] = Load("multi_io");
  for (int i = 0; i < 3; ++i) MakeExec(kinds[Pick(n_kinds)] - '0');
  for (int s = 0; s < steps; ++s) {
    Exec* e = &execs[Pick(n_execs)];
    printf("%d: ", s);
    switch (Pick(16)) {
      case 0: case 1: StepSetInput(e, 0); break;
      case 2: StepSetInput(e, 1); break;
      case 3: case 4: StepGet(e, 1); break;
      case 5: StepGet(e, 0); break;
      case 6: case 7: StepSimple(e, "run"); break;
      case 8: StepLoadParams(e); printf("\n"); break;
      case 9: StepShareParams(e); printf("\n"); break;
      case 10: StepCopyOutput(e); printf("\n"); break;
      case 11: StepZeroCopyOutput(e); printf("\n"); break;
      case 12: StepWriteView(); break;
      case 13: StepArrayCopy(); break;
      case 14: StepIndex(e); break;
      default:
        if (Pick(4) == 0) MakeExec(kinds[Pick(n_kinds)] - '0');
        else StepGlobal();
        printf("\n");
        break;
    }
    /* DIFFTEST_KEPT=1: the bytes of every array kept so far after each step, to stderr, for
     * finding the step where two runtimes' memory first differs. */
    if (trace_kept) {
      fprintf(stderr, "kept after %d:", s);
      for (int i = 0; i < n_kept; ++i)
        fprintf(stderr, " %d=%04llx", i, (unsigned long long)(Hash((char*)kept[i]->data + kept[i]->byte_offset, Bytes(kept[i])) & 0xffff));
      fprintf(stderr, "\n");
    }
  }
  for (int i = 0; i < n_kept; ++i) TVMArrayFree(kept[i]);
  for (int i = 0; i < n_held; ++i) TVMArrayFree(held[i]);
  for (int i = 0; i < n_execs; ++i) {
    TVMModFree(execs[i].mod);
    free(execs[i].params);
  }
  TVMModFree(libs[0]);
  TVMModFree(libs[1]);
  TVMModFree(libs[3]);
  printf("end\n");
  return 0;
}
