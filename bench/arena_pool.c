/* A server's shape: executors of one model at several batch sizes or sequence lengths, several of
 * each, sharing one set of weights, and a few host threads running random ones for a while; for
 * whichever libtvm_runtime.so the dynamic linker finds (bench/arena_pool.sh runs ours, with and
 * without a pool of activation arenas, and upstream's).
 * usage: arena_pool SECONDS THREADS PER_VARIANT DIR:WEIGHT...
 *   Executor 0 is the first DIR's and loads its params.bin; every other executor (PER_VARIANT of
 *   each DIR) shares them from executor 0 (share_params). Each executor's "data" input is zeros.
 *   An executor is run by one thread at a time. WEIGHT is what one run counts for (its batch or
 *   sequence length). Prints, where the runtime has get_memory_usage (ours), "report JSON" for
 *   each executor, then
 *   "result RUNS SAMPLES_PER_S MEMORY_SETUP_KB MEMORY_END_KB VMRSS_END_KB MEMORY_BASELINE_KB"
 *   (baseline: after the libraries and the params blob are loaded, before any executor)
 * ARENA_DEVICE=4: the executors run on OpenCL device 0 (default 1, the CPU); each run is followed
 *   by TVMSynchronize on it.
 * DEVICE_BYTES=SHIM: memory is the live bytes of every buffer and image on the device, counted by
 *   the OpenCL shim the runtime loaded (c_tests/opencl_shim.c), instead of VmData. */
#include <pthread.h>

#include "bench_util.h"

typedef struct {
  TVMModuleHandle ex;
  pthread_mutex_t busy;
  int weight;
} Executor;

static Executor* all;
static int n_all;
static double deadline;
static long runs[64];
static double samples[64];

static int device_type = 1;

/* Sets input "data" of ex to zeros (upstream's storage starts uninitialised). */
static void zero_data(TVMModuleHandle ex) {
  TVMFunctionHandle f;
  TVMValue v, r;
  int c = kTVMStr, rc;
  CHECK(TVMModGetFunction(ex, "get_input_index", 0, &f));
  v.v_str = "data";
  CHECK(TVMFuncCall(f, &v, &c, 1, &r, &rc));
  TVMFuncFree(f);
  CHECK(TVMModGetFunction(ex, "get_input", 0, &f));
  c = kDLInt;
  CHECK(TVMFuncCall(f, &r, &c, 1, &v, &rc));
  TVMFuncFree(f);
  DLTensor* t = v.v_handle;
  size_t n = (t->dtype.bits * t->dtype.lanes + 7) / 8;
  for (int i = 0; i < t->ndim; i++) n *= (size_t)t->shape[i];
  void* zeros = calloc(1, n);
  CHECK(TVMArrayCopyFromBytes(t, zeros, n));
  free(zeros);
}

static void* worker(void* arg) {
  int me = (int)(long)arg;
  unsigned state = 2654435761u * (unsigned)(me + 1);
  TVMFunctionHandle* run = calloc(n_all, sizeof *run);
  for (int i = 0; i < n_all; i++) CHECK(TVMModGetFunction(all[i].ex, "run", 0, &run[i]));
  while (now_ns() < deadline) {
    state = state * 1103515245u + 12345u;
    int k = (int)((state >> 8) % (unsigned)n_all);
    while (pthread_mutex_trylock(&all[k].busy) != 0) k = (k + 1) % n_all;
    TVMValue r;
    int rc;
    CHECK(TVMFuncCall(run[k], NULL, NULL, 0, &r, &rc));
    /* On a device, a run counts once it is done, as a host that reads the outputs waits for it
     * (without this, runs only queue kernels and the queue grows without bound). */
    if (device_type != kDLCPU) CHECK(TVMSynchronize(device_type, 0, NULL));
    pthread_mutex_unlock(&all[k].busy);
    runs[me]++;
    samples[me] += all[k].weight;
  }
  for (int i = 0; i < n_all; i++) TVMFuncFree(run[i]);
  free(run);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  double seconds = atof(argv[1]);
  int threads = atoi(argv[2]), per = atoi(argv[3]), variants = argc - 4;
  if (threads < 1 || threads > 64) return 2;
  if (getenv("ARENA_DEVICE")) device_type = atoi(getenv("ARENA_DEVICE"));
  n_all = per * variants;
  all = calloc(n_all, sizeof *all);
  size_t n;
  char first[1024];
  snprintf(first, sizeof first, "%s", argv[4]);
  *strchr(first, ':') = 0;
  char* params = slurp(first, "params.bin", &n);
  TVMByteArray blob = {params, n};
  TVMModuleHandle* libs = calloc(variants, sizeof *libs);
  char** jsons = calloc(variants, sizeof *jsons);
  for (int v = 0; v < variants; v++) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", argv[4 + v]);
    *strchr(dir, ':') = 0;
    jsons[v] = slurp(dir, "graph.json", &n);
    libs[v] = load_lib(dir);
  }
  long baseline = memory_kb();
  for (int v = 0; v < variants; v++) {
    int weight = atoi(strchr(argv[4 + v], ':') + 1);
    const char* json = jsons[v];
    TVMModuleHandle lib = libs[v];
    for (int i = 0; i < per; i++) {
      Executor* e = &all[v * per + i];
      e->ex = create_graph_executor_on(json, lib, device_type);
      bind_weights(e->ex, v * per + i ? all[0].ex : NULL, &blob);
      zero_data(e->ex);
      call_packed(e->ex, "run", NULL, NULL, 0);
      pthread_mutex_init(&e->busy, NULL);
      e->weight = weight;
    }
  }
  long rss, data, data_setup = memory_kb(), data_end;
  double start = now_ns();
  deadline = start + seconds * 1e9;
  pthread_t tid[64];
  for (int t = 0; t < threads; t++) pthread_create(&tid[t], NULL, worker, (void*)(long)t);
  long total = 0;
  double weighted = 0;
  for (int t = 0; t < threads; t++) {
    pthread_join(tid[t], NULL);
    total += runs[t];
    weighted += samples[t];
  }
  double elapsed = (now_ns() - start) / 1e9;
  data_end = memory_kb();
  vm_kb(&rss, &data);
  for (int i = 0; i < n_all; i++) {
    TVMFunctionHandle f = NULL;
    if (TVMModGetFunction(all[i].ex, "get_memory_usage", 0, &f) != 0 || !f) break;
    TVMValue r;
    int rc;
    CHECK(TVMFuncCall(f, NULL, NULL, 0, &r, &rc));
    printf("report %s\n", r.v_str);
    TVMFuncFree(f);
  }
  printf("result %ld %.2f %ld %ld %ld %ld\n", total, weighted / elapsed, data_setup, data_end, rss, baseline);
  return 0;
}
