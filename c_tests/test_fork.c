/* fork() after running models: the child has only the forking thread, so the runtime puts right
 * what it cannot inherit (the thread pool's workers, a launch's lock, arenas lent to other
 * threads' runs, any lock another thread held). The child runs the parent's model and one it
 * loads itself, while the parent keeps other threads running, then while they load libraries and
 * make executors without pause (the registry's, the contexts', the executors' and the arena
 * pools' locks are taken and let go all the time); every child must answer right within a
 * deadline (a hang is a failure). Last, four threads run graph executors and Relay VMs back to
 * back while the main thread forks 200 times: no fork may wait out the runtime's patience (it
 * waits for the runs in flight, one run each, then forks). usage: test_fork FIXTURE_DIR (a model
 * whose kernels launch in parallel, with the VM fixtures at FIXTURE_DIR/../vm) */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "executor.h"

static Fixture fx;
static double fork_and_wait(TVMModuleHandle g, const char* when);
static TVMModuleHandle lib;
static TVMModuleHandle vm_exe;
static atomic_int stop;

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Another thread of the parent, invoking a Relay VM of its own (the MLP at batch 2) without
 * pause. */
static void* keep_invoking(void* arg) {
  (void)arg;
  TVMValue r, init[3] = {{.v_int64 = kDLCPU}, {.v_int64 = 0}, {.v_int64 = 2}};
  int rc = 0, codes[3] = {kDLInt, kDLInt, kDLInt};
  if (call_named(vm_exe, "vm_load_executable", NULL, NULL, 0, &r, &rc) != 0) {
    CHECK(0, "vm thread: %s", TVMGetLastError());
    return NULL;
  }
  TVMModuleHandle vm = r.v_handle;
  OK(call_named(vm, "init", init, codes, 3, &r, &rc));
  float x[2 * 16] = {0};
  int64_t shape[2] = {2, 16};
  DLTensor t = {x, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, 0};
  while (!atomic_load(&stop)) {
    TVMValue a[2] = {{.v_str = "main"}, {.v_handle = &t}};
    int c[2] = {kTVMStr, kTVMDLTensorHandle};
    if (call_named(vm, "set_input", a, c, 2, &r, &rc) != 0 || call_named(vm, "invoke", a, c, 1, &r, &rc) != 0) {
      CHECK(0, "vm thread: %s", TVMGetLastError());
      break;
    }
    CHECK(rc == kTVMObjectHandle, "vm thread: a result of type code %d", rc);
    if (rc == kTVMObjectHandle) TVMObjectFree(r.v_handle);
  }
  TVMModFree(vm);
  return NULL;
}

/* Another thread of the parent, running its own executor of the model without pause. */
static void* keep_running(void* arg) {
  (void)arg;
  TVMModuleHandle g = create_from_factory(lib);
  while (g && !atomic_load(&stop)) run_and_check(g, &fx, "parent thread");
  if (g) TVMModFree(g);
  return NULL;
}

/* Another thread of the parent, loading the library and making an executor of it again and
 * again, each run once. */
static void* keep_loading(void* arg) {
  (void)arg;
  char path[700];
  snprintf(path, sizeof path, "%s/lib.so", fx.dir);
  while (!atomic_load(&stop)) {
    TVMModuleHandle own = NULL;
    if (TVMModLoadFromFile(path, "", &own) != 0) {
      CHECK(0, "parent thread: load: %s", TVMGetLastError());
      break;
    }
    TVMModuleHandle g = create_from_factory(own);
    if (g) {
      run_and_check(g, &fx, "parent thread, a new executor");
      TVMModFree(g);
    }
    TVMModFree(own);
  }
  return NULL;
}

/* Runs `bodies` on threads of their own while forking `forks` times; returns the longest fork. */
static double with_threads(void* (*const* bodies)(void*), int threads, TVMModuleHandle g, int forks, long pause_ns,
                           const char* when) {
  pthread_t t[4];
  double longest = 0;
  atomic_store(&stop, 0);
  for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, bodies[i], NULL);
  for (int i = 0; i < forks; i++) {
    /* The first fork comes at once, while the threads are still starting. */
    struct timespec pause = {0, i == 0 ? 0 : pause_ns};
    nanosleep(&pause, NULL);
    double took = fork_and_wait(g, when);
    if (took > longest) longest = took;
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  return longest;
}

/* In the child: the parent's executor, then a library and executor of its own. */
static int child(TVMModuleHandle parents) {
  alarm(60); /* a hang ends the child with SIGALRM, which the parent reports */
  run_and_check(parents, &fx, "child, the parent's executor");
  char path[700];
  snprintf(path, sizeof path, "%s/lib.so", fx.dir);
  TVMModuleHandle own = NULL;
  OK(TVMModLoadFromFile(path, "", &own));
  TVMModuleHandle g = create_from_factory(own);
  if (g) {
    run_and_check(g, &fx, "child, its own executor");
    TVMModFree(g);
  }
  TVMModFree(own);
  return g_failures ? 3 : 0;
}

/* Forks, has the child run, waits for it; returns how long the fork itself took in the parent. */
static double fork_and_wait(TVMModuleHandle g, const char* when) {
  fflush(NULL);
  double start = now_s();
  pid_t pid = fork();
  if (pid == 0) _exit(child(g));
  double took = now_s() - start;
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid, "%s: waitpid", when);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: the child %s %d", when,
        WIFSIGNALED(status) ? "was killed (hung?) by signal" : "exited",
        WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
  return took;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  CHECK(load_fixture(argv[1], &fx) == 0, "manifest");
  char path[700];
  snprintf(path, sizeof path, "%s/lib.so", argv[1]);
  OK(TVMModLoadFromFile(path, "", &lib));
  TVMModuleHandle g = create_from_factory(lib);
  if (!g) return 1;
  run_and_check(g, &fx, "parent, before forking"); /* the thread pool runs now */
  fork_and_wait(g, "a quiet parent");
  void* (*const running[2])(void*) = {keep_running, keep_running};
  with_threads(running, 2, g, 5, 20 * 1000 * 1000, "a parent with threads running");
  void* (*const loading[2])(void*) = {keep_loading, keep_loading};
  with_threads(loading, 2, g, 200, 0, "a parent with threads loading");
  snprintf(path, sizeof path, "%s/../vm/0.16/mlp_dyn/vm.so", argv[1]);
  OK(TVMModLoadFromFile(path, "", &vm_exe));
  void* (*const both[4])(void*) = {keep_running, keep_invoking, keep_running, keep_invoking};
  double longest = with_threads(both, 4, g, 200, 0, "a parent with graph executors and VMs running back to back");
  /* Each fork waits for the runs in flight (one each), never the runtime's patience (10 s). */
  CHECK(longest < 5.0, "a fork took %.1f s while threads ran models back to back", longest);
  printf("longest fork with four threads running: %.1f ms\n", longest * 1e3);
  OK(TVMModFree(vm_exe));
  run_and_check(g, &fx, "parent, after the forks");
  OK(TVMModFree(g));
  OK(TVMModFree(lib));
  if (g_failures) {
    fprintf(stderr, "%d checks failed\n", g_failures);
    return 1;
  }
  printf("fork ok\n");
  return 0;
}
