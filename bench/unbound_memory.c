/* Memory of executors sharing weights, one executor at a time, for whichever libtvm_runtime.so the
 * dynamic linker finds (bench/unbound.sh runs ours and upstream's).
 * usage: unbound_memory K FIRST_DIR OTHER_DIR
 *   Executor 0 is FIRST_DIR's graph and loads FIRST_DIR/params.bin; executors 1..K are OTHER_DIR's
 *   graph (the same model at another batch size, or the same one) and share_params from executor 0.
 *   Each runs once on zeroed inputs when made. Prints, after the libraries and the blob are loaded
 *   and after each executor:  "vm LABEL VmData_kB VmRSS_kB"; and, where the runtime has
 *   get_memory_usage (ours), "report LABEL JSON" for executor 0 and the last one. */
#include "bench_util.h"

static void vm(const char* label) {
  long rss, data;
  vm_kb(&rss, &data);
  printf("vm %s %ld %ld\n", label, data, rss);
}

static void report(TVMModuleHandle m, const char* label) {
  TVMFunctionHandle f = NULL;
  if (TVMModGetFunction(m, "get_memory_usage", 0, &f) != 0 || !f) return;
  TVMValue r;
  int rc;
  CHECK(TVMFuncCall(f, NULL, NULL, 0, &r, &rc));
  printf("report %s %s\n", label, r.v_str);
  TVMFuncFree(f);
}

int main(int argc, char** argv) {
  if (argc != 4) return 2;
  int k = atoi(argv[1]);
  const char *first = argv[2], *other = argv[3];
  size_t n;
  char* params = slurp(first, "params.bin", &n);
  TVMByteArray blob = {params, n};
  char* json_first = slurp(first, "graph.json", &n);
  char* json_other = slurp(other, "graph.json", &n);
  TVMModuleHandle lib_first = load_lib(first), lib_other = load_lib(other);
  vm("baseline");
  TVMModuleHandle* ex = calloc(k + 1, sizeof *ex);
  for (int i = 0; i <= k; i++) {
    ex[i] = create_graph_executor(i ? json_other : json_first, i ? lib_other : lib_first);
    bind_weights(ex[i], i ? ex[0] : NULL, &blob);
    call_packed(ex[i], "run", NULL, NULL, 0);
    char label[32];
    snprintf(label, sizeof label, "%d", i);
    vm(label);
  }
  report(ex[0], "first");
  report(ex[k], "last");
  for (int i = 0; i <= k; i++) TVMModFree(ex[i]);
  TVMModFree(lib_first);
  TVMModFree(lib_other);
  free(ex);
  free(params);
  free(json_first);
  free(json_other);
  return 0;
}
