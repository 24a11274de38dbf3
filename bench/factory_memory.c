/* Memory of K executors made by one model's factory (`lib["default"](cpu)`: bound params, the
 * factory holding the weights), for whichever libtvm_runtime.so the dynamic linker finds.
 * usage: factory_memory MODEL_DIR K      prints "vm K VmData_kB" after the library is loaded
 * (K = 0) and after each executor is made and run once. */
#include "bench_util.h"

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  const char* dir = argv[1];
  int k = atoi(argv[2]);
  char path[1024];
  snprintf(path, sizeof path, "%s/lib.so", dir);
  TVMModuleHandle lib;
  CHECK(TVMModLoadFromFile(path, "so", &lib));
  long rss, data;
  vm_kb(&rss, &data);
  printf("vm 0 %ld\n", data);
  TVMFunctionHandle def;
  CHECK(TVMModGetFunction(lib, "default", 0, &def));
  for (int i = 1; i <= k; i++) {
    TVMValue v, r;
    int c = kDLDevice, rc;
    v.v_device.device_type = kDLCPU;
    v.v_device.device_id = 0;
    CHECK(TVMFuncCall(def, &v, &c, 1, &r, &rc));
    call_packed(r.v_handle, "run", NULL, NULL, 0);
    vm_kb(&rss, &data);
    printf("vm %d %ld\n", i, data);
  }
  return 0;
}
