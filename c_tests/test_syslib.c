/* A --system-lib build linked into this program: its operators register themselves at start-up
 * and the model comes from the global runtime.SystemLib. usage: test_syslib FIXTURE_DIR */
#include "executor.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  Fixture fx;
  CHECK(load_fixture(argv[1], &fx) == 0, "manifest");
  TVMFunctionHandle syslib = NULL;
  OK(TVMFuncGetGlobal("runtime.SystemLib", &syslib));
  TVMValue r;
  int rc;
  OK(TVMFuncCall(syslib, NULL, NULL, 0, &r, &rc));
  CHECK(rc == kTVMModuleHandle, "SystemLib returned code %d", rc);
  TVMModuleHandle lib = r.v_handle;
  TVMModuleHandle gmod = create_from_factory(lib);
  CHECK(gmod != NULL, "the system library carries no factory");
  if (gmod) run_and_check(gmod, &fx, "system library");
  TVMFuncFree(syslib);
  OK(TVMModFree(gmod));
  OK(TVMModFree(lib));
  if (g_failures) return 1;
  printf("system library ok\n");
  return 0;
}
