/* Throughput with several host threads, each running an executor of its own on one model: what a
 * server does. Prints runs per second over all threads. The same driver runs on either runtime
 * (LD_LIBRARY_PATH picks it); on ours the executors share one copy of the weights, one thread pool.
 *   throughput MODEL_DIR HOST_THREADS SECONDS */
#include <pthread.h>

#include "bench_util.h"

static TVMModuleHandle g_lib;
static char* g_json;
static TVMByteArray g_params;
static double g_seconds;

static TVMFunctionHandle fn(TVMModuleHandle m, const char* name) {
  TVMFunctionHandle f;
  CHECK(TVMModGetFunction(m, name, 0, &f));
  return f;
}

static pthread_mutex_t g_create = PTHREAD_MUTEX_INITIALIZER;

static void* worker(void* out) {
  pthread_mutex_lock(&g_create);
  TVMModuleHandle ex = create_graph_executor(g_json, g_lib);
  TVMValue v[1], r;
  int c[1] = {kTVMBytes}, rc;
  v[0].v_handle = &g_params;
  TVMFunctionHandle load = fn(ex, "load_params");
  CHECK(TVMFuncCall(load, v, c, 1, &r, &rc));
  TVMFuncFree(load);
  pthread_mutex_unlock(&g_create);
  TVMFunctionHandle run = fn(ex, "run");
  CHECK(TVMFuncCall(run, NULL, NULL, 0, &r, &rc)); /* warm up */
  long runs = 0;
  double end = now_ns() + g_seconds * 1e9;
  while (now_ns() < end) {
    CHECK(TVMFuncCall(run, NULL, NULL, 0, &r, &rc));
    runs++;
  }
  TVMFuncFree(run);
  TVMModFree(ex);
  *(long*)out = runs;
  return NULL;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: throughput MODEL_DIR HOST_THREADS SECONDS\n");
    return 2;
  }
  int k = atoi(argv[2]);
  g_seconds = atof(argv[3]);
  size_t n;
  g_json = slurp(argv[1], "graph.json", &n);
  g_params.data = slurp(argv[1], "params.bin", &g_params.size);
  char path[1024];
  snprintf(path, sizeof path, "%s/lib.so", argv[1]);
  CHECK(TVMModLoadFromFile(path, "so", &g_lib));
  pthread_t t[64];
  long runs[64] = {0};
  if (k < 1 || k > 64) return 2;
  for (int i = 0; i < k; i++) pthread_create(&t[i], NULL, worker, &runs[i]);
  long total = 0;
  for (int i = 0; i < k; i++) {
    pthread_join(t[i], NULL);
    total += runs[i];
  }
  printf("%.1f runs/s\n", total / g_seconds);
  TVMModFree(g_lib);
  return 0;
}
