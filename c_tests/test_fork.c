/* fork() after running models: the child has only the forking thread, so the runtime puts right
 * what it cannot inherit (the thread pool's workers, a launch's lock, arenas lent to other
 * threads' runs, any lock another thread held). The child runs the parent's model and one it
 * loads itself, while the parent keeps other threads running, then while they load libraries and
 * make executors without pause (the registry's, the contexts', the executors' and the arena
 * pools' locks are taken and let go all the time); every child must answer right within a
 * deadline (a hang is a failure). usage: test_fork FIXTURE_DIR (a model whose kernels launch in
 * parallel) */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "executor.h"

static Fixture fx;
static void fork_and_wait(TVMModuleHandle g, const char* when);
static TVMModuleHandle lib;
static atomic_int stop;

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

static void with_threads(void* (*body)(void*), TVMModuleHandle g, int forks, long pause_ns, const char* when) {
  pthread_t t[2];
  atomic_store(&stop, 0);
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, body, NULL);
  for (int i = 0; i < forks; i++) {
    /* The first fork comes at once, while the threads are still starting. */
    struct timespec pause = {0, i == 0 ? 0 : pause_ns};
    nanosleep(&pause, NULL);
    fork_and_wait(g, when);
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
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

static void fork_and_wait(TVMModuleHandle g, const char* when) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) _exit(child(g));
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid, "%s: waitpid", when);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s: the child %s %d", when,
        WIFSIGNALED(status) ? "was killed (hung?) by signal" : "exited",
        WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
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
  with_threads(keep_running, g, 5, 20 * 1000 * 1000, "a parent with threads running");
  with_threads(keep_loading, g, 200, 0, "a parent with threads loading");
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
