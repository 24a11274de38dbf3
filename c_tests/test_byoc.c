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
 * usage: test_byoc FIXTURE_DIR [PLUGIN_SO] (tests/fixtures/byoc/ccompiler) */
#include <dlfcn.h>

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
  if (g_failures) return 1;
  printf("byoc ok\n");
  return 0;
}
