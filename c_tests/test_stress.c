/* K executors (batch 1 and batch 8 builds) sharing one copy of the weights run at once from K
 * threads, each checking its outputs byte for byte against upstream's every iteration, while
 * another thread keeps creating, sharing into, running and freeing executors, and the executor the
 * weights came from is freed halfway. Run under valgrind by CTest, and again with
 * TVM_RT_ARENA_POOL=2: every executor then draws its activations from one pool of two arenas, so
 * the four threads' runs wait for each other while executors join and leave the pool.
 * usage: test_stress FIXTURES_DIR [ITERATIONS] */
#include <pthread.h>

#include "executor.h"

enum { K = 4 };

static char dir1[600], dir8[600];
static Fixture fx1, fx8;
static TVMModuleHandle lib1, lib8;
static int iterations = 20;
static void* blob1;
static size_t blob1_size;

static void share(TVMModuleHandle dst, TVMModuleHandle src) { share_params_blob(dst, src, blob1, blob1_size); }

typedef struct {
  TVMModuleHandle executor;
  const Fixture* fx;
} Job;

static void* run_many(void* arg) {
  Job* job = arg;
  for (int i = 0; i < iterations; i++) run_and_check(job->executor, job->fx, "stress");
  return NULL;
}

static void* churn(void* arg) {
  TVMModuleHandle source = arg;
  for (int i = 0; i < iterations / 2; i++) {
    int b8 = i % 2;
    TVMModuleHandle m = create_from_json(b8 ? lib8 : lib1, b8 ? dir8 : dir1);
    share(m, source);
    run_and_check(m, b8 ? &fx8 : &fx1, "churn");
    OK(TVMModFree(m));
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  if (argc > 2) iterations = atoi(argv[2]);
  snprintf(dir1, sizeof dir1, "%s/mlp_unbound_b1", argv[1]);
  snprintf(dir8, sizeof dir8, "%s/mlp_unbound_b8", argv[1]);
  CHECK(load_fixture(dir1, &fx1) == 0 && load_fixture(dir8, &fx8) == 0, "fixtures");
  char path[700];
  snprintf(path, sizeof path, "%s/params.bin", dir1);
  blob1 = read_file(path, &blob1_size);
  snprintf(path, sizeof path, "%s/lib.so", dir1);
  OK(TVMModLoadFromFile(path, "", &lib1));
  snprintf(path, sizeof path, "%s/lib.so", dir8);
  OK(TVMModLoadFromFile(path, "", &lib8));

  TVMModuleHandle source = create_from_json(lib1, dir1);
  load_params(source, dir1);
  Job jobs[K];
  for (int k = 0; k < K; k++) {
    jobs[k].fx = k % 2 ? &fx8 : &fx1;
    jobs[k].executor = create_from_json(k % 2 ? lib8 : lib1, k % 2 ? dir8 : dir1);
    share(jobs[k].executor, source);
  }
  /* The churn thread shares from an executor of its own, which it keeps. */
  TVMModuleHandle churn_source = create_from_json(lib1, dir1);
  share(churn_source, source);

  /* Pooled when asked: the executors' memory report names the pool (the same one for all). */
  const char* pool = getenv("TVM_RT_ARENA_POOL");
  if (pool && atoi(pool) > 0) {
    TVMFunctionHandle f = get_fn(jobs[0].executor, "get_memory_usage");
    TVMValue r;
    int rc;
    OK(TVMFuncCall(f, NULL, NULL, 0, &r, &rc));
    CHECK(strstr(r.v_str, "\"pool\": {") != NULL, "a pooled executor's report names its pool");
    OK(TVMFuncFree(f));
  }

  pthread_t threads[K + 1];
  for (int k = 0; k < K; k++) CHECK(pthread_create(&threads[k], NULL, run_many, &jobs[k]) == 0, "thread");
  CHECK(pthread_create(&threads[K], NULL, churn, churn_source) == 0, "thread");
  /* The executor the weights came from goes while the others run on its weights. */
  OK(TVMModFree(source));
  for (int k = 0; k <= K; k++) pthread_join(threads[k], NULL);

  for (int k = 0; k < K; k++) OK(TVMModFree(jobs[k].executor));
  OK(TVMModFree(churn_source));
  OK(TVMModFree(lib1));
  OK(TVMModFree(lib8));
  free(blob1);
  if (g_failures) {
    fprintf(stderr, "%d checks failed\n", g_failures);
    return 1;
  }
  printf("stress ok: %d executors x %d runs while %d were created and freed\n", K, iterations, iterations / 2);
  return 0;
}
