/* Packed functions from C: callbacks with resources and finalizers, return values of every kind,
 * the global registry, TVMCbArgToReturn, objects and containers. */
#include "fixture.h"

static int finalized = 0;
static void finalizer(void* resource) { finalized += *(int*)resource; }

/* Returns args[0] + resource as an int, or the string argument echoed, or an error. */
static int add_cb(TVMValue* args, int* codes, int n, TVMRetValueHandle ret, void* resource) {
  TVMValue out;
  int code;
  if (n == 1 && codes[0] == kTVMStr) {
    out.v_str = args[0].v_str;
    code = kTVMStr;
  } else if (n == 1 && codes[0] == kDLInt) {
    out.v_int64 = args[0].v_int64 + *(int*)resource;
    code = kDLInt;
  } else if (n == 1 && codes[0] == kTVMNDArrayHandle) {
    /* Keep the array: take a reference and return it. */
    out = args[0];
    code = codes[0];
    if (TVMCbArgToReturn(&out, &code) != 0) return -1;
    int rc = TVMCFuncSetReturn(ret, &out, &code, 1);
    TVMArrayFree(out.v_handle);
    return rc;
  } else {
    TVMAPISetLastError("ValueError: add_cb wants one int or string");
    return -1;
  }
  return TVMCFuncSetReturn(ret, &out, &code, 1);
}

int main(void) {
  static int resource = 40;
  TVMFunctionHandle f = NULL, g = NULL;
  OK(TVMFuncCreateFromCFunc(add_cb, &resource, finalizer, &f));
  OK(TVMFuncRegisterGlobal("test.add", f, 0));
  CHECK(TVMFuncRegisterGlobal("test.add", f, 0) == -1, "duplicate registration accepted");
  CHECK(strstr(TVMGetLastError(), "already registered") != NULL, "%s", TVMGetLastError());
  OK(TVMFuncRegisterGlobal("test.add", f, 1));

  int n = 0, found = 0;
  const char** names = NULL;
  OK(TVMFuncListGlobalNames(&n, &names));
  for (int i = 0; i < n; i++) found += !strcmp(names[i], "test.add") + !strcmp(names[i], "runtime.ModuleLoadFromFile");
  CHECK(found == 2, "global names listing (%d of %d)", found, n);

  OK(TVMFuncGetGlobal("test.add", &g));
  CHECK(g != NULL, "lookup");
  TVMValue v[2], r;
  int c[2], rc;
  v[0].v_int64 = 2;
  c[0] = kDLInt;
  OK(TVMFuncCall(g, v, c, 1, &r, &rc));
  CHECK(rc == kDLInt && r.v_int64 == 42, "int result %d %lld", rc, (long long)r.v_int64);
  v[0].v_str = "hello";
  c[0] = kTVMStr;
  OK(TVMFuncCall(g, v, c, 1, &r, &rc));
  CHECK(rc == kTVMStr && !strcmp(r.v_str, "hello"), "string result");
  v[0].v_float64 = 1.0;
  c[0] = kDLFloat;
  CHECK(TVMFuncCall(g, v, c, 1, &r, &rc) == -1, "callback error propagates");
  CHECK(strstr(TVMGetLastError(), "ValueError: add_cb wants") != NULL, "%s", TVMGetLastError());

  int64_t shape[2] = {2, 3};
  TVMArrayHandle a = NULL;
  OK(TVMArrayAlloc(shape, 2, 2, 32, 1, kDLCPU, 0, &a));
  v[0].v_handle = a;
  c[0] = kTVMNDArrayHandle;
  OK(TVMFuncCall(g, v, c, 1, &r, &rc));
  CHECK(rc == kTVMNDArrayHandle && r.v_handle == a, "array passed through");
  OK(TVMArrayFree(r.v_handle));
  OK(TVMArrayFree(a));

  /* Globals Python relies on: strings, shape tuples, maps, params round trip. */
  TVMFunctionHandle shape_tuple, size_fn, save, load;
  OK(TVMFuncGetGlobal("runtime.ShapeTuple", &shape_tuple));
  OK(TVMFuncGetGlobal("runtime.GetShapeTupleSize", &size_fn));
  v[0].v_int64 = 4;
  v[1].v_int64 = 5;
  c[0] = c[1] = kDLInt;
  OK(TVMFuncCall(shape_tuple, v, c, 2, &r, &rc));
  CHECK(rc == kTVMObjectHandle, "ShapeTuple code %d", rc);
  unsigned idx = 0;
  OK(TVMObjectGetTypeIndex(r.v_handle, &idx));
  CHECK(idx == 6, "ShapeTuple type index %u", idx);
  TVMObjectHandle tuple = r.v_handle;
  v[0].v_handle = tuple;
  c[0] = kTVMObjectHandle;
  OK(TVMFuncCall(size_fn, v, c, 1, &r, &rc));
  CHECK(r.v_int64 == 2, "tuple size");
  OK(TVMObjectFree(tuple));

  OK(TVMFuncGetGlobal("runtime.SaveParams", &save));
  OK(TVMFuncGetGlobal("runtime.LoadParams", &load));
  TVMFunctionHandle map_fn;
  OK(TVMFuncGetGlobal("runtime.Map", &map_fn));
  OK(TVMArrayAlloc(shape, 2, 2, 32, 1, kDLCPU, 0, &a));
  float data[6] = {1, 2, 3, 4, 5, 6};
  OK(TVMArrayCopyFromBytes(a, data, sizeof data));
  v[0].v_str = "w";
  c[0] = kTVMStr;
  v[1].v_handle = a;
  c[1] = kTVMNDArrayHandle;
  OK(TVMFuncCall(map_fn, v, c, 2, &r, &rc));
  TVMObjectHandle map = r.v_handle;
  v[0].v_handle = map;
  c[0] = kTVMObjectHandle;
  OK(TVMFuncCall(save, v, c, 1, &r, &rc));
  CHECK(rc == kTVMBytes, "SaveParams gives bytes");
  TVMByteArray* bytes = r.v_handle;
  CHECK(bytes->size == 8 + 8 + 8 + (8 + 1) + 8 + (8 + 8 + 4 + 4 + 4 + 4 + 16 + 8 + 24), "params size %zu", bytes->size);
  TVMByteArray copy = {malloc(bytes->size), bytes->size};
  memcpy((void*)copy.data, bytes->data, bytes->size);
  OK(TVMByteArrayFree(bytes));
  v[0].v_handle = &copy;
  c[0] = kTVMBytes;
  OK(TVMFuncCall(load, v, c, 1, &r, &rc));
  CHECK(rc == kTVMObjectHandle, "LoadParams gives a Map");
  OK(TVMObjectFree(r.v_handle));
  free((void*)copy.data);
  OK(TVMObjectFree(map));
  OK(TVMArrayFree(a));
  TVMFuncFree(shape_tuple);
  TVMFuncFree(size_fn);
  TVMFuncFree(save);
  TVMFuncFree(load);
  TVMFuncFree(map_fn);

  /* The finalizer runs once, when the last reference goes. */
  OK(TVMFuncFree(f));
  OK(TVMFuncFree(g));
  CHECK(finalized == 0, "finalized while registered");
  OK(TVMFuncRemoveGlobal("test.add"));
  CHECK(finalized == 40, "finalizer ran %d", finalized);
  OK(TVMFuncRemoveGlobal("test.never_registered"));

  if (g_failures) {
    fprintf(stderr, "%d checks failed\n", g_failures);
    return 1;
  }
  printf("packed functions ok\n");
  return 0;
}
