/* Memory of K executors sharing one model's weights, for whichever libtvm_runtime.so the dynamic
 * linker finds (ours or upstream's: bench/share_memory.sh runs both).
 * usage: share_memory MODEL_DIR K [OTHER_MODEL_DIR [arena]]
 *   Creates K executors of MODEL_DIR (tvm.graph_executor.create; the first load_params, the rest
 *   share_params from it), runs them, frees them; with OTHER_MODEL_DIR, the K-th executor is of
 *   that graph instead (e.g. batch 8 sharing batch 1's weights); with "arena", the executors also
 *   share one activation arena (this runtime's share_activations; upstream has none). Prints VmRSS
 *   and VmData (kB). */
#include "bench_util.h"

static void mem(const char* step) {
  long rss, data;
  vm_kb(&rss, &data);
  printf("%-28s VmRSS %8ld kB  VmData %8ld kB\n", step, rss, data);
}

static TVMModuleHandle create(const char* dir, TVMModuleHandle* lib_out) {
  char path[1024];
  size_t n;
  snprintf(path, sizeof path, "%s/lib.so", dir);
  CHECK(TVMModLoadFromFile(path, "so", lib_out));
  char* json = slurp(dir, "graph.json", &n);
  TVMModuleHandle ex = create_graph_executor(json, *lib_out);
  free(json);
  return ex;
}

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  const char* dir = argv[1];
  int k = atoi(argv[2]);
  const char* other = argc > 3 ? argv[3] : NULL;
  int arena = argc > 4 && !strcmp(argv[4], "arena");
  mem("baseline");
  size_t pn;
  char* params = slurp(dir, "params.bin", &pn);
  TVMByteArray blob = {params, pn};
  TVMModuleHandle* libs = calloc(k, sizeof *libs);
  TVMModuleHandle* ex = calloc(k, sizeof *ex);
  for (int i = 0; i < k; i++) {
    ex[i] = create(other && i == k - 1 ? other : dir, &libs[i]);
    bind_weights(ex[i], i ? ex[0] : NULL, &blob);
    if (i && arena) {
      TVMValue v = {.v_handle = ex[0]};
      int c = kTVMModuleHandle;
      call_packed(ex[i], "share_activations", &v, &c, 1);
    }
  }
  free(params);
  char label[64];
  snprintf(label, sizeof label, "%d executors created", k);
  mem(label);
  for (int i = 0; i < k; i++) call_packed(ex[i], "run", NULL, NULL, 0);
  snprintf(label, sizeof label, "%d executors ran", k);
  mem(label);
  for (int i = 0; i < k; i++) {
    TVMModFree(ex[i]);
    TVMModFree(libs[i]);
  }
  free(ex);
  free(libs);
  mem("all freed");
  return 0;
}
