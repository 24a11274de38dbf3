/* A --system-lib build linked into this program: its operators register themselves at start-up
 * and the model comes from the global runtime.SystemLib. usage: test_syslib FIXTURE_DIR */
#include "fixture.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  Fixture fx;
  CHECK(load_fixture(argv[1], &fx) == 0, "manifest");
  TVMFunctionHandle syslib = NULL;
  OK(TVMFuncGetGlobal("runtime.SystemLib", &syslib));
  TVMValue v[2], r;
  int c[2], rc;
  OK(TVMFuncCall(syslib, NULL, NULL, 0, &r, &rc));
  CHECK(rc == kTVMModuleHandle, "SystemLib returned code %d", rc);
  TVMModuleHandle lib = r.v_handle;
  TVMFunctionHandle f = NULL;
  OK(TVMModGetFunction(lib, "default", 0, &f));
  CHECK(f != NULL, "the system library carries no factory");
  v[0].v_device.device_type = kDLCPU;
  v[0].v_device.device_id = 0;
  c[0] = kDLDevice;
  OK(TVMFuncCall(f, v, c, 1, &r, &rc));
  TVMModuleHandle gmod = r.v_handle;
  TVMFunctionHandle set_input, run, get_output;
  OK(TVMModGetFunction(gmod, "set_input", 0, &set_input));
  OK(TVMModGetFunction(gmod, "run", 0, &run));
  OK(TVMModGetFunction(gmod, "get_output", 0, &get_output));
  const FixtureTensor* in = &fx.inputs[0];
  TVMArrayHandle x = NULL;
  OK(TVMArrayAlloc(in->shape, in->ndim, 2, 32, 1, kDLCPU, 0, &x));
  size_t size;
  void* data = read_file(in->file, &size);
  OK(TVMArrayCopyFromBytes(x, data, size));
  v[0].v_str = in->name;
  c[0] = kTVMStr;
  v[1].v_handle = x;
  c[1] = kTVMNDArrayHandle;
  OK(TVMFuncCall(set_input, v, c, 2, &r, &rc));
  OK(TVMFuncCall(run, NULL, NULL, 0, &r, &rc));
  v[0].v_int64 = 0;
  c[0] = kDLInt;
  OK(TVMFuncCall(get_output, v, c, 1, &r, &rc));
  void* want = read_file(fx.outputs[0].file, &size);
  void* got = malloc(size);
  OK(TVMArrayCopyToBytes(r.v_handle, got, size));
  CHECK(memcmp(want, got, size) == 0, "system-lib output differs from upstream's");
  OK(TVMArrayFree(r.v_handle));
  OK(TVMArrayFree(x));
  free(data);
  free(want);
  free(got);
  TVMFuncFree(set_input);
  TVMFuncFree(run);
  TVMFuncFree(get_output);
  TVMFuncFree(f);
  TVMFuncFree(syslib);
  OK(TVMModFree(gmod));
  OK(TVMModFree(lib));
  if (g_failures) return 1;
  printf("system library ok\n");
  return 0;
}
