/* AOT executor artefacts (scripts/make_aot_fixtures.py: every option a Runtime("cpp") build
 * takes), from C: each folder's factory makes executors whose outputs equal the compiler's own
 * runtime's; four executors of one artefact at once; upstream's function table (input index and
 * names as the compiler sanitised them, list_module_names, remove_params); clear errors for an
 * unknown input, a wrong size, a device the AOT executor does not run on.
 * usage: test_aot AOT_FIXTURES_DIR MIN_ARTEFACTS (tests/fixtures/aot/0.16 7) */
#include <ctype.h>
#include <dirent.h>

#include "executor.h"

/* The manifest's `module_name` line (the factory's function that makes an executor). */
static void module_name_of(const char* dir, char* out, size_t n) {
  char path[700], line[256];
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  snprintf(out, n, "default");
  FILE* f = fopen(path, "r");
  if (!f) return;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "module_name ", 12)) {
      size_t len = strcspn(line + 12, "\n");
      if (len >= n) len = n - 1;
      memcpy(out, line + 12, len);
      out[len] = 0;
    }
  fclose(f);
}

static TVMModuleHandle make_executor(TVMModuleHandle lib, const char* module_name, int device_type) {
  TVMValue v, r;
  int c = kDLDevice, rc = 0;
  v.v_device.device_type = (DLDeviceType)device_type;
  v.v_device.device_id = 0;
  if (call_named(lib, module_name, &v, &c, 1, &r, &rc) != 0) return NULL;
  CHECK(rc == kTVMModuleHandle, "%s returned type code %d", module_name, rc);
  return rc == kTVMModuleHandle ? r.v_handle : NULL;
}

static int64_t int_call(TVMModuleHandle m, const char* name, TVMValue* v, int* c, int n) {
  TVMValue r;
  int rc = 0;
  OK(call_named(m, name, v, c, n, &r, &rc));
  CHECK(rc == kDLInt, "%s returned type code %d", name, rc);
  return r.v_int64;
}

static void function_table(TVMModuleHandle lib, TVMModuleHandle ex, const Fixture* fx, const char* module_name) {
  TVMValue v[2], r;
  int c[2] = {kTVMStr, kTVMNDArrayHandle}, rc = 0;
  CHECK(int_call(ex, "get_num_inputs", v, c, 0) == fx->num_inputs, "get_num_inputs");
  CHECK(int_call(ex, "get_num_outputs", v, c, 0) == fx->num_outputs, "get_num_outputs");
  /* Names as written (input.1) and as the compiler sanitised them (input_1). */
  v[0].v_str = fx->inputs[0].name;
  CHECK(int_call(ex, "get_input_index", v, c, 1) == 0, "get_input_index('%s')", fx->inputs[0].name);
  v[0].v_str = "no_such_input";
  CHECK(int_call(ex, "get_input_index", v, c, 1) == -1, "get_input_index of an unknown name is -1");
  v[0].v_int64 = 0;
  c[0] = kDLInt;
  OK(call_named(ex, "get_input_name", v, c, 1, &r, &rc));
  char want[128];
  snprintf(want, sizeof want, "%s", fx->inputs[0].name);
  for (char* p = want; *p; p++)
    if (!isalnum((unsigned char)*p)) *p = '_';
  CHECK(rc == kTVMStr && !strcmp(r.v_str, want), "get_input_name(0) is '%s'", want);

  /* An unknown input, a tensor of the wrong size: errors that say so. */
  TVMArrayHandle small = NULL;
  int64_t shape[1] = {3};
  OK(TVMArrayAlloc(shape, 1, kDLFloat, 32, 1, kDLCPU, 0, &small));
  v[0].v_str = "no_such_input";
  c[0] = kTVMStr;
  v[1].v_handle = small;
  CHECK(call_named(ex, "set_input", v, c, 2, &r, &rc) != 0 && strstr(TVMGetLastError(), "no input 'no_such_input'"),
        "set_input of an unknown name: %s", TVMGetLastError());
  v[0].v_str = fx->inputs[0].name;
  CHECK(call_named(ex, "set_input", v, c, 2, &r, &rc) != 0 && strstr(TVMGetLastError(), "12 bytes"),
        "set_input of a wrong size: %s", TVMGetLastError());
  OK(TVMArrayFree(small));

  /* The factory's own functions. */
  OK(call_named(lib, "list_module_names", v, c, 0, &r, &rc));
  CHECK(rc == kTVMObjectHandle, "list_module_names returned type code %d", rc);
  if (rc == kTVMObjectHandle) OK(TVMObjectFree(r.v_handle));
  OK(call_named(lib, "remove_params", v, c, 0, &r, &rc));
  CHECK(rc == kTVMModuleHandle, "remove_params returned type code %d", rc);
  if (rc == kTVMModuleHandle) {
    TVMModuleHandle again = make_executor(r.v_handle, module_name, kDLCPU);
    CHECK(again != NULL, "an executor from the factory without params");
    if (again) run_and_check(again, fx, "an executor of remove_params' factory");
    if (again) OK(TVMModFree(again));
    OK(TVMModFree(r.v_handle));
  }
  /* Not on another device: upstream's AOT executor runs on cpu(0) alone. */
  TVMModuleHandle elsewhere = make_executor(lib, module_name, kDLOpenCL);
  CHECK(elsewhere == NULL && strstr(TVMGetLastError(), "cpu(0)"), "an OpenCL device is refused: %s",
        TVMGetLastError());
}

static void artefact(const char* dir) {
  Fixture fx;
  CHECK(load_fixture(dir, &fx) == 0, "manifest of %s", dir);
  char module_name[128], path[700];
  module_name_of(dir, module_name, sizeof module_name);
  snprintf(path, sizeof path, "%s/lib.so", dir);
  TVMModuleHandle lib = NULL;
  OK(TVMModLoadFromFile(path, "", &lib));
  if (!lib) return;
  /* Four executors of one artefact, each run and checked. */
  TVMModuleHandle ex[4] = {0};
  for (int k = 0; k < 4; k++) ex[k] = make_executor(lib, module_name, kDLCPU);
  for (int k = 0; k < 4; k++) {
    CHECK(ex[k] != NULL, "executor %d of %s", k, dir);
    if (ex[k]) run_and_check(ex[k], &fx, dir);
  }
  if (ex[0]) function_table(lib, ex[0], &fx, module_name);
  for (int k = 0; k < 4; k++)
    if (ex[k]) OK(TVMModFree(ex[k]));
  OK(TVMModFree(lib));
}

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  DIR* d = opendir(argv[1]);
  CHECK(d != NULL, "cannot open %s", argv[1]);
  if (!d) return 1;
  int seen = 0;
  struct dirent* e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char dir[600];
    snprintf(dir, sizeof dir, "%s/%s", argv[1], e->d_name);
    artefact(dir);
    seen++;
  }
  closedir(d);
  CHECK(seen >= atoi(argv[2]), "%d AOT artefacts in %s", seen, argv[1]);
  if (g_failures) return 1;
  printf("aot ok (%d artefacts)\n", seen);
  return 0;
}
