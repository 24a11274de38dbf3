/* BYOC: an export_library artefact whose tree is GraphExecutorFactory -> const_loader ->
 * [library, a ccompiler module] (scripts/make_byoc_fixtures.py, TVM 0.16). Making the executor
 * asks const_loader for the external function, which first calls the module's generated
 * `__init_<symbol>` with an Array of its constants: compiled C++ that reads the Array as
 * upstream's ArrayNode. Outputs against the compiler's own runtime's. Also the Array layout
 * itself, as C++ compiled against upstream's headers reads it: after the 16-byte object header,
 * int64 size, int64 capacity, then the element handles inline.
 * With a plug-in (a BYOC JSON backend built on upstream's JSONRuntimeBase, c_tests/cxx/plugin/
 * json_plugin.cc) loaded first, the same for an artefact holding that backend's module
 * (tests/fixtures/byoc/json): its constant reaches the backend through `__init_` too.
 * A damaged const_loader map (the ccompiler fixture with one byte of the symbol its constants are
 * for changed) leaves the entry uninitialised: the generated C++ then throws from the operator
 * ("C source module hasn't been initialized"), which must come back as -1 and that message, not
 * abort the process ("Rust cannot catch foreign exceptions").
 * usage: test_byoc FIXTURE_DIR [PLUGIN_SO] (tests/fixtures/byoc/ccompiler) */
#include <dlfcn.h>
#include <unistd.h>

#include "executor.h"

/* upstream's ArrayNode, as its headers lay it out */
typedef struct {
  uint32_t type_index;
  int32_t ref_counter;
  void (*deleter)(void*);
  int64_t size, capacity;
  void* items[];
} ArrayNode;

static void array_layout(void) {
  TVMFunctionHandle make = NULL, size = NULL;
  OK(TVMFuncGetGlobal("runtime.Array", &make));
  OK(TVMFuncGetGlobal("runtime.ArraySize", &size));
  TVMArrayHandle a = NULL, b = NULL;
  int64_t shape[1] = {3};
  OK(TVMArrayAlloc(shape, 1, kDLFloat, 32, 1, kDLCPU, 0, &a));
  OK(TVMArrayAlloc(shape, 1, kDLFloat, 32, 1, kDLCPU, 0, &b));
  TVMValue v[3], r;
  int codes[3] = {kTVMNDArrayHandle, kTVMNDArrayHandle, kTVMNDArrayHandle}, rc = 0;
  v[0].v_handle = a;
  v[1].v_handle = b;
  v[2].v_handle = a;
  OK(TVMFuncCall(make, v, codes, 3, &r, &rc));
  CHECK(rc == kTVMObjectHandle, "runtime.Array returned type code %d", rc);
  const ArrayNode* arr = (const ArrayNode*)r.v_handle;
  CHECK(arr->size == 3 && arr->capacity >= 3, "ArrayNode size %lld capacity %lld", (long long)arr->size,
        (long long)arr->capacity);
  /* An NDArray handle is its object's header plus 16: the items are the objects' headers. */
  CHECK(arr->items[0] == (char*)a - 16 && arr->items[1] == (char*)b - 16 && arr->items[2] == (char*)a - 16,
        "ArrayNode items %p %p %p for arrays at %p %p", arr->items[0], arr->items[1], arr->items[2], (void*)a,
        (void*)b);
  TVMValue s;
  int sc = kTVMObjectHandle;
  OK(TVMFuncCall(size, &r, &sc, 1, &s, &rc));
  CHECK(s.v_int64 == 3, "runtime.ArraySize %lld", (long long)s.v_int64);
  OK(TVMObjectFree(r.v_handle));
  OK(TVMArrayFree(a));
  OK(TVMArrayFree(b));
  TVMFuncFree(make);
  TVMFuncFree(size);
}

/* The library at `path` with the const_loader's entry for `symbol` renamed (its last byte changed),
 * written to a new file whose name is put in `out`. Returns 0, or -1 when the entry is not found. */
static int write_damaged_map(const char* path, const char* symbol, char* out, size_t cap) {
  size_t size = 0, len = strlen(symbol);
  unsigned char* bytes = read_file(path, &size);
  if (!bytes) return -1;
  /* The map's symbol list holds each symbol as a u64 length and its bytes. */
  unsigned char pattern[8 + 64];
  if (len > 64) return -1;
  for (int i = 0; i < 8; i++) pattern[i] = (unsigned char)((uint64_t)len >> (8 * i));
  memcpy(pattern + 8, symbol, len);
  int found = -1;
  for (size_t at = 0; at + 8 + len <= size; at++) {
    if (memcmp(bytes + at, pattern, 8 + len) == 0) {
      bytes[at + 8 + len - 1] ^= 0x01;
      found = 0;
      break;
    }
  }
  snprintf(out, cap, "/tmp/tvmrt_byoc_damaged_%d.so", (int)getpid());
  FILE* f = found == 0 ? fopen(out, "wb") : NULL;
  if (f) {
    found = fwrite(bytes, 1, size, f) == size ? 0 : -1;
    fclose(f);
  } else {
    found = -1;
  }
  free(bytes);
  return found;
}

static void uninitialised_entry(const char* lib_path) {
  char damaged[128];
  CHECK(write_damaged_map(lib_path, "tvmgen_default_ccompiler_main_0", damaged, sizeof damaged) == 0,
        "no const_loader entry to damage in %s", lib_path);
  TVMModuleHandle lib = NULL;
  OK(TVMModLoadFromFile(damaged, "", &lib));
  TVMModuleHandle gmod = lib ? create_from_factory(lib) : NULL;
  CHECK(gmod != NULL, "no executor from the damaged library");
  if (gmod) {
    TVMFunctionHandle run = get_fn(gmod, "run");
    TVMValue r;
    int rc = 0;
    CHECK(call(run, NULL, NULL, 0, &r, &rc) == -1, "a run whose operator throws succeeded");
    CHECK(strstr(TVMGetLastError(), "hasn't been initialized") != NULL, "the operator's exception is lost: %s",
          TVMGetLastError());
    /* And the executor, like the process, lives on: the same failure again. */
    CHECK(call(run, NULL, NULL, 0, &r, &rc) == -1, "a second run succeeded");
    TVMFuncFree(run);
    OK(TVMModFree(gmod));
  }
  if (lib) OK(TVMModFree(lib));
  unlink(damaged);
}

int main(int argc, char** argv) {
  if (argc != 2 && argc != 3) return 2;
  /* A plug-in the artefact needs (its module types), loaded first as a host does. */
  if (argc == 3 && !dlopen(argv[2], RTLD_NOW | RTLD_LOCAL)) {
    fprintf(stderr, "cannot load the plug-in %s: %s\n", argv[2], dlerror());
    return 1;
  }
  array_layout();
  Fixture fx;
  CHECK(load_fixture(argv[1], &fx) == 0, "manifest");
  char path[700];
  snprintf(path, sizeof path, "%s/lib.so", argv[1]);
  TVMModuleHandle lib = NULL;
  OK(TVMModLoadFromFile(path, "", &lib));
  if (!lib) return 1;
  /* Two executors: __init_ runs once, for the first. */
  for (int k = 0; k < 2; k++) {
    TVMModuleHandle gmod = create_from_factory(lib);
    CHECK(gmod != NULL, "no executor from the factory");
    if (!gmod) break;
    run_and_check(gmod, &fx, k == 0 ? "a BYOC (ccompiler) artefact" : "its second executor");
    OK(TVMModFree(gmod));
  }
  OK(TVMModFree(lib));
  if (argc == 2) uninitialised_entry(path);
  if (g_failures) return 1;
  printf("byoc ok\n");
  return 0;
}
