/* Relax VM executables (TVM 0.19 to 0.27, all three ABI generations) through the C API, as a C
 * host drives them: the library loaded (TVMModLoadFromFile), a VM made (vm_load_executable),
 * vm_initialization, the Relax function called by its name with plain DLTensors, tuples read back
 * through runtime.ArraySize/ArrayGetItem; every output compared with the bytes of each version's
 * own runtime (tests/fixtures/relax). Also: a VM outliving its executable's handle, an unknown
 * function, a call before vm_initialization, and a tvm-ffi kernel called wrongly (its own check
 * raises through TVMFFIErrorSetRaisedFromCStrParts: -1 and the message). Run under valgrind by
 * CTest. usage: test_relax RELAX_FIXTURES_DIR (tests/fixtures/relax) */
#include "fixture.h"

#define MAX_CASES 4
#define MAX_IO 8

typedef struct {
  int num_inputs, num_outputs;
  FixtureTensor inputs[MAX_IO], outputs[MAX_IO];
} RelaxCase;

typedef struct {
  int num_cases;
  RelaxCase cases[MAX_CASES];
} RelaxFixture;

static int load_relax_fixture(const char* dir, RelaxFixture* fx) {
  char path[640], line[1024];
  memset(fx, 0, sizeof *fx);
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  while (fgets(line, sizeof line, f)) {
    RelaxCase* c = fx->num_cases ? &fx->cases[fx->num_cases - 1] : NULL;
    if (!strncmp(line, "case ", 5) && fx->num_cases < MAX_CASES) fx->num_cases++;
    else if (c && !strncmp(line, "input ", 6) && c->num_inputs < MAX_IO) parse_tensor(line + 6, &c->inputs[c->num_inputs++], dir, 1);
    else if (c && !strncmp(line, "output ", 7) && c->num_outputs < MAX_IO) parse_tensor(line + 7, &c->outputs[c->num_outputs++], dir, 0);
  }
  fclose(f);
  return fx->num_cases > 0 ? 0 : -1;
}

/* Flattens an Array (or a single NDArray) result into `out`: NDArray handles with a count each. */
static void flatten(TVMValue v, int code, TVMArrayHandle* out, int* n) {
  if (code == kTVMNDArrayHandle) {
    if (*n < MAX_IO) out[(*n)++] = (TVMArrayHandle)v.v_handle;
    else TVMArrayFree((TVMArrayHandle)v.v_handle);
    return;
  }
  CHECK(code == kTVMObjectHandle, "a result of type code %d", code);
  if (code != kTVMObjectHandle) return;
  TVMValue a[2], r;
  int c[2] = {kTVMObjectHandle, kDLInt}, rc = 0;
  a[0] = v;
  OK(call_named(NULL, "runtime.ArraySize", a, c, 1, &r, &rc));
  int64_t size = r.v_int64;
  for (int64_t i = 0; i < size; i++) {
    a[1].v_int64 = i;
    OK(call_named(NULL, "runtime.ArrayGetItem", a, c, 2, &r, &rc));
    flatten(r, rc, out, n);
  }
  TVMObjectFree(v.v_handle);
}

/* Calls `main` on a case's inputs (plain DLTensors over the files' bytes); compares every output. */
static void run_case(TVMModuleHandle vm, const RelaxCase* c, const char* how) {
  void* buffers[MAX_IO] = {0};
  DLTensor t[MAX_IO];
  TVMValue v[MAX_IO], r;
  int codes[MAX_IO], rc = 0;
  for (int i = 0; i < c->num_inputs; i++) {
    size_t size = 0;
    buffers[i] = read_file(c->inputs[i].file, &size);
    int dcode, bits;
    dtype_of(c->inputs[i].dtype, &dcode, &bits);
    DLTensor x = {buffers[i], {kDLCPU, 0}, c->inputs[i].ndim, {(uint8_t)dcode, (uint8_t)bits, 1},
                  (int64_t*)c->inputs[i].shape, NULL, 0};
    t[i] = x;
    v[i].v_handle = &t[i];
    codes[i] = kTVMDLTensorHandle;
  }
  OK(call_named(vm, "main", v, codes, c->num_inputs, &r, &rc));
  TVMArrayHandle outs[MAX_IO];
  int n = 0;
  flatten(r, rc, outs, &n);
  CHECK(n == c->num_outputs, "%s: %d outputs, %d expected", how, n, c->num_outputs);
  for (int i = 0; i < n && i < c->num_outputs; i++) {
    size_t size = 0;
    void* want = read_file(c->outputs[i].file, &size);
    CHECK((int64_t)size == num_bytes(&c->outputs[i]), "%s: output %d file", how, i);
    void* got = malloc(size ? size : 1);
    OK(TVMArrayCopyToBytes(outs[i], got, size));
    CHECK(!memcmp(got, want, size), "%s: output %d differs from the version's own runtime", how, i);
    CHECK(outs[i]->ndim == c->outputs[i].ndim, "%s: output %d rank", how, i);
    free(got);
    free(want);
    TVMArrayFree(outs[i]);
  }
  for (int i = 0; i < c->num_inputs; i++) free(buffers[i]);
}

static TVMModuleHandle make_vm(TVMModuleHandle exe, int initialise) {
  TVMValue r, init[3];
  int rc = 0, codes[3] = {kDLInt, kDLInt, kDLInt};
  OK(call_named(exe, "vm_load_executable", NULL, NULL, 0, &r, &rc));
  TVMModuleHandle vm = r.v_handle;
  init[0].v_int64 = kDLCPU;
  init[1].v_int64 = 0;
  init[2].v_int64 = 2; /* pooled */
  if (initialise) OK(call_named(vm, "vm_initialization", init, codes, 3, &r, &rc));
  return vm;
}

static void check_model(const char* root, const char* version, const char* model) {
  char dir[256], path[320], how[400];
  snprintf(dir, sizeof dir, "%s/%s/%s", root, version, model);
  RelaxFixture fx;
  if (load_relax_fixture(dir, &fx) != 0) {
    CHECK(0, "no fixture at %s", dir);
    return;
  }
  snprintf(path, sizeof path, "%s/model.so", dir);
  TVMModuleHandle exe = NULL;
  OK(TVMModLoadFromFile(path, "", &exe));
  if (!exe) return;
  TVMModuleHandle a = make_vm(exe, 1);
  for (int k = 0; k < fx.num_cases; k++) {
    snprintf(how, sizeof how, "%s %s case %d", version, model, k);
    run_case(a, &fx.cases[k], how);
  }
  OK(TVMModFree(exe)); /* the VM keeps the executable alive */
  snprintf(how, sizeof how, "%s %s after the executable handle was freed", version, model);
  run_case(a, &fx.cases[0], how);
  OK(TVMModFree(a));
}

static void bad_calls(const char* root) {
  char path[700];
  snprintf(path, sizeof path, "%s/0.27/mlp_bound/model.so", root);
  TVMModuleHandle exe = NULL;
  OK(TVMModLoadFromFile(path, "", &exe));
  if (!exe) return;
  TVMFunctionHandle f = NULL;
  OK(TVMModGetFunction(exe, "no_such_function", 1, &f));
  CHECK(f == NULL, "an unknown function was found");
  TVMModuleHandle vm = make_vm(exe, 0);
  TVMValue r, x;
  int rc = 0, code = kTVMDLTensorHandle;
  int64_t shape[2] = {2, 16};
  float data[32] = {0};
  DLTensor t = {data, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, 0};
  x.v_handle = &t;
  CHECK(call_named(vm, "main", &x, &code, 1, &r, &rc) == -1 && strstr(TVMGetLastError(), "vm_initialization"),
        "a call before vm_initialization: %s", TVMGetLastError());
  /* The matmul kernel called with one argument: its own check raises. */
  OK(TVMModGetFunction(exe, "matmul", 1, &f));
  CHECK(f != NULL, "no matmul kernel");
  if (f) {
    CHECK(TVMFuncCall(f, &x, &code, 1, &r, &rc) == -1 && strstr(TVMGetLastError(), "matmul"),
          "a kernel called wrongly: %s", TVMGetLastError());
    OK(TVMFuncFree(f));
  }
  OK(TVMModFree(vm));
  OK(TVMModFree(exe));
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const char* versions[] = {"0.19", "0.21", "0.25", "0.26", "0.27"};
  const char* models[] = {"mlp_args", "mlp_bound", "conv", "tuple_mixed", "parallel", "control", "runtime_ops"};
  for (int v = 0; v < 5; v++)
    for (int m = 0; m < 7; m++) check_model(argv[1], versions[v], models[m]);
  bad_calls(argv[1]);
  if (g_failures) {
    fprintf(stderr, "%d checks failed\n", g_failures);
    return 1;
  }
  printf("relax ok\n");
  return 0;
}
