/* Mapped vs copied weights, for whichever libtvm_runtime.so the dynamic linker finds.
 *   map_params time MODEL_DIR PARAMS_FILE copy|map N   -> median create+load time of N rounds (ms)
 *   map_params pss  MODEL_DIR PARAMS_FILE copy|map SYNC_DIR K INDEX
 *       loads, runs once, waits until K processes are ready, prints this process's PSS (kB). */
#include <unistd.h>

#include "bench_util.h"

static double now_ms(void) { return now_ns() / 1e6; }

static void call(TVMModuleHandle m, const char* name, TVMValue* v, int* c, int n) {
  TVMFunctionHandle f;
  TVMValue r;
  int rc;
  CHECK(TVMModGetFunction(m, name, 0, &f));
  if (!f) { fprintf(stderr, "no function %s in this runtime\n", name); exit(3); }
  CHECK(TVMFuncCall(f, v, c, n, &r, &rc));
  TVMFuncFree(f);
}

/* create + load: the params file is read (copy) or mapped (map) as part of the measured work. */
static TVMModuleHandle create_and_load(const char* json, TVMModuleHandle lib, const char* params, int map) {
  TVMModuleHandle ex = create_graph_executor(json, lib);
  TVMValue v[1];
  int c[1];
  if (map) {
    v[0].v_str = params;
    c[0] = kTVMStr;
    call(ex, "load_params_from_file", v, c, 1);
  } else {
    size_t n;
    char* blob = slurp(params, NULL, &n);
    TVMByteArray b = {blob, n};
    v[0].v_handle = &b;
    c[0] = kTVMBytes;
    call(ex, "load_params", v, c, 1);
    free(blob);
  }
  return ex;
}

static long pss_kb(void) {
  FILE* f = fopen("/proc/self/smaps_rollup", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "Pss: %ld", &kb) == 1) break;
  if (f) fclose(f);
  return kb;
}

int main(int argc, char** argv) {
  if (argc < 6) return 2;
  const char *mode = argv[1], *dir = argv[2], *params = argv[3];
  int map = !strcmp(argv[4], "map");
  char path[1024];
  size_t n;
  snprintf(path, sizeof path, "%s/graph.json", dir);
  char* json = slurp(path, NULL, &n);
  snprintf(path, sizeof path, "%s/lib.so", dir);
  TVMModuleHandle lib;
  CHECK(TVMModLoadFromFile(path, "so", &lib));
  if (!strcmp(mode, "time")) {
    int rounds = atoi(argv[5]);
    double* t = malloc(sizeof(double) * rounds);
    for (int i = 0; i < rounds; i++) {
      double t0 = now_ms();
      TVMModuleHandle ex = create_and_load(json, lib, params, map);
      t[i] = now_ms() - t0;
      TVMModFree(ex);
    }
    qsort(t, rounds, sizeof(double), cmp_double);
    printf("%.3f\n", t[rounds / 2]);
    return 0;
  }
  const char* sync = argv[5];
  int k = atoi(argv[6]), me = atoi(argv[7]);
  TVMModuleHandle ex = create_and_load(json, lib, params, map);
  call(ex, "run", NULL, NULL, 0);
  snprintf(path, sizeof path, "%s/ready-%d", sync, me);
  fclose(fopen(path, "w"));
  for (int ready = 0; ready < k;) { /* wait until every process has loaded and run */
    ready = 0;
    for (int i = 0; i < k; i++) {
      snprintf(path, sizeof path, "%s/ready-%d", sync, i);
      ready += access(path, F_OK) == 0;
    }
    usleep(20000);
  }
  usleep(200000);
  printf("%ld\n", pss_kb());
  fflush(stdout);
  snprintf(path, sizeof path, "%s/done", sync);
  while (access(path, F_OK) != 0) usleep(20000);
  return 0;
}
