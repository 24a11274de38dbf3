/* Device failures never leave an executor runnable on bad memory. With the runtime's OpenCL
 * library replaced by c_tests/opencl_shim.c (TVM_RT_OPENCL_LIBRARY), every OpenCL call made by
 * each step of a session (create, load_params, share_params, set_input, run, get_output) is made
 * to fail in turn, once and from then on (through the later steps too). For every case: each call
 * returns 0, or -1 with a message and the executors' memory reports unchanged; once the device
 * works again, every step from the first that failed completes; the outputs are upstream's
 * bytes; and a new executor runs exactly.
 *
 *   test_opencl_faults FIXTURES/opencl SHIM.so                sweep: every case, each in a process
 *   test_opencl_faults FIXTURES/opencl SHIM.so count          calls per step, one line each
 *   test_opencl_faults FIXTURES/opencl SHIM.so STEP FUNC N P  one case (N-th call of FUNC in STEP,
 *                                                             P = 1: and every later call)
 * Exits 77 (skipped) without an OpenCL device. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "executor.h"

enum { CREATE, LOAD, SHARE, SET_INPUT, RUN, GET_OUTPUT, NUM_STEPS };
static const char* STEP_NAMES[NUM_STEPS] = {"create", "load", "share", "set_input", "run", "get_output"};

typedef void (*FailFn)(const char*, long, int);
typedef void (*ResetFn)(void);
typedef const char* (*CountFn)(int, long*);
static FailFn shim_fail;
static ResetFn shim_reset;
static CountFn shim_count;

/* One session's state. */
typedef struct {
  const char* dir1;
  const char* dir4;
  Fixture f1, f4;
  TVMModuleHandle lib1, lib4, a, b;
  TVMArrayHandle in, out;
  void *params1, *params4, *want;
  size_t params1_size, params4_size, want_size;
} Session;

static void* must_read(const char* dir, const char* file, size_t* size) {
  char path[700];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  void* data = read_file(path, size);
  if (!data) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(2);
  }
  return data;
}

static int call_fn(TVMModuleHandle m, const char* name, TVMValue* v, int* c, int n, TVMValue* r) {
  TVMFunctionHandle f = NULL;
  if (TVMModGetFunction(m, name, 0, &f) != 0 || !f) return -1;
  int rc = 0;
  int status = TVMFuncCall(f, v, c, n, r, &rc);
  TVMFuncFree(f);
  return status;
}

/* The step's call; 0 or -1. */
static int step(Session* s, int which) {
  TVMValue v[4], r;
  int c[4];
  switch (which) {
    case CREATE:
    case SHARE: {
      const char* dir = which == CREATE ? s->dir1 : s->dir4;
      if (which == SHARE && s->b == NULL) {
        /* The sharer is made outside the step (its own calls are the create step's business). */
        shim_fail("", 0, 0);
      }
      TVMModuleHandle* slot = which == CREATE ? &s->a : &s->b;
      if (*slot == NULL) {
        size_t size = 0;
        char* json = must_read(dir, "graph.json", &size);
        json = realloc(json, size + 1);
        json[size] = 0;
        TVMFunctionHandle create = NULL;
        OK(TVMFuncGetGlobal("tvm.graph_executor.create", &create));
        v[0].v_str = json;
        c[0] = kTVMStr;
        v[1].v_handle = which == CREATE ? s->lib1 : s->lib4;
        c[1] = kTVMModuleHandle;
        v[2].v_int64 = kDLOpenCL;
        v[3].v_int64 = 0;
        c[2] = c[3] = kDLInt;
        int rc = 0;
        int status = TVMFuncCall(create, v, c, 4, &r, &rc);
        TVMFuncFree(create);
        free(json);
        if (status != 0) return status;
        *slot = r.v_handle;
        if (which == CREATE) return 0;
      }
      TVMByteArray arr = {(const char*)s->params4, s->params4_size};
      v[0].v_handle = s->a;
      c[0] = kTVMModuleHandle;
      v[1].v_handle = &arr;
      c[1] = kTVMBytes;
      return call_fn(s->b, "share_params", v, c, 2, &r);
    }
    case LOAD: {
      TVMByteArray arr = {(const char*)s->params1, s->params1_size};
      v[0].v_handle = &arr;
      c[0] = kTVMBytes;
      return call_fn(s->a, "load_params", v, c, 1, &r);
    }
    case SET_INPUT:
      v[0].v_str = s->f1.inputs[0].name;
      c[0] = kTVMStr;
      v[1].v_handle = s->in;
      c[1] = kTVMNDArrayHandle;
      return call_fn(s->a, "set_input", v, c, 2, &r);
    case RUN:
      return call_fn(s->a, "run", NULL, NULL, 0, &r);
    default:
      v[0].v_int64 = 0;
      c[0] = kDLInt;
      v[1].v_handle = s->out;
      c[1] = kTVMNDArrayHandle;
      return call_fn(s->a, "get_output", v, c, 2, &r);
  }
}

static void array_for(const FixtureTensor* t, TVMArrayHandle* out) {
  int code, bits;
  dtype_of(t->dtype, &code, &bits);
  OK(TVMArrayAlloc(t->shape, t->ndim, code, bits, 1, kDLCPU, 0, out));
}

static int same_output(TVMArrayHandle out, const void* want, size_t size) {
  void* got = calloc(1, size);
  OK(TVMArrayCopyToBytes(out, got, size));
  int same = memcmp(got, want, size) == 0;
  free(got);
  return same;
}

/* The executor's memory report (what it holds, by kind), or "" for none. */
static void memory_report(TVMModuleHandle m, char* out, size_t size) {
  TVMValue r;
  out[0] = 0;
  if (m && call_fn(m, "get_memory_usage", NULL, NULL, 0, &r) == 0) snprintf(out, size, "%s", r.v_str);
}

/* A new executor (create, load, run) gives upstream's bytes. */
static void fresh_executor_runs(Session* s) {
  TVMModuleHandle keep_a = s->a;
  s->a = NULL;
  CHECK(step(s, CREATE) == 0, "a new executor: %s", TVMGetLastError());
  for (int k = LOAD; k <= GET_OUTPUT; k++) {
    if (k == SHARE) continue;
    CHECK(step(s, k) == 0, "a new executor, %s: %s", STEP_NAMES[k], TVMGetLastError());
  }
  CHECK(same_output(s->out, s->want, s->want_size), "a new executor's output differs from upstream's");
  TVMModFree(s->a);
  s->a = keep_a;
}

/* Runs a session; with `fail_step` >= 0, arms the shim for that step. In count mode, prints the
 * calls of each step. */
static int session(const char* root, int count, int fail_step, const char* func, long n, int persistent) {
  static Session s;
  char d1[600], d4[600];
  snprintf(d1, sizeof d1, "%s/mlp_unbound_cl_b1", root);
  snprintf(d4, sizeof d4, "%s/mlp_unbound_cl_b4", root);
  s.dir1 = d1;
  s.dir4 = d4;
  if (load_fixture(d1, &s.f1) || load_fixture(d4, &s.f4)) return 2;
  char lib[700];
  snprintf(lib, sizeof lib, "%s/lib.so", d1);
  OK(TVMModLoadFromFile(lib, "so", &s.lib1));
  snprintf(lib, sizeof lib, "%s/lib.so", d4);
  OK(TVMModLoadFromFile(lib, "so", &s.lib4));
  s.params1 = must_read(d1, "params.bin", &s.params1_size);
  s.params4 = must_read(d4, "params.bin", &s.params4_size);
  s.want = read_file(s.f1.outputs[0].file, &s.want_size);
  array_for(&s.f1.inputs[0], &s.in);
  array_for(&s.f1.outputs[0], &s.out);
  size_t size = 0;
  void* in = read_file(s.f1.inputs[0].file, &size);
  OK(TVMArrayCopyFromBytes(s.in, in, size));
  free(in);

  /* The faulty pass: a failure once, or (persistent) in every later call of the function, in this
   * step and all the later ones. Every step completes, or fails with a message and leaves what an
   * outside observer sees of the executors (their memory report) as it was. */
  int first_failed = NUM_STEPS;
  for (int k = 0; k < NUM_STEPS; k++) {
    shim_reset();
    if (k == fail_step) shim_fail(func, n, persistent);
    /* What a failure must leave as it was (an executor made by the failing step was not there). */
    char before_a[1024], before_b[1024], after[1024];
    TVMModuleHandle had_a = s.a, had_b = s.b;
    memory_report(s.a, before_a, sizeof before_a);
    memory_report(s.b, before_b, sizeof before_b);
    int status = step(&s, k);
    char message[512] = "";
    if (status) snprintf(message, sizeof message, "%s", TVMGetLastError());
    if (!persistent) shim_fail("", 0, 0);
    if (count) {
      long calls = 0;
      const char* name;
      for (int i = 0; (name = shim_count(i, &calls)) != NULL; i++)
        if (calls > 0) printf("%s %s %ld\n", STEP_NAMES[k], name, calls);
    }
    CHECK(status == 0 || status == -1, "%s returned %d", STEP_NAMES[k], status);
    if (status != 0) {
      CHECK(fail_step >= 0 && k >= fail_step, "%s failed with no fault armed: %s", STEP_NAMES[k], message);
      CHECK(*message, "%s failed without a message", STEP_NAMES[k]);
      if (first_failed == NUM_STEPS) first_failed = k;
      memory_report(had_a, after, sizeof after);
      CHECK(!strcmp(before_a, after), "%s failed (%s) and changed the executor: %s -> %s", STEP_NAMES[k], message,
            before_a, after);
      memory_report(had_b, after, sizeof after);
      CHECK(!strcmp(before_b, after), "%s failed (%s) and changed the sharer: %s -> %s", STEP_NAMES[k], message,
            before_b, after);
    }
  }
  /* The device works again: from the first step that failed, every step completes. */
  shim_fail("", 0, 0);
  for (int k = first_failed; k < NUM_STEPS; k++)
    CHECK(step(&s, k) == 0, "%s, with the device working again: %s", STEP_NAMES[k], TVMGetLastError());
  CHECK(same_output(s.out, s.want, s.want_size), "the output differs from upstream's");
  /* The sharer (batch 4, sharing the batch-1 weights) runs exactly too. */
  if (s.b) {
    TVMArrayHandle in4, out4;
    array_for(&s.f4.inputs[0], &in4);
    array_for(&s.f4.outputs[0], &out4);
    void* data = read_file(s.f4.inputs[0].file, &size);
    OK(TVMArrayCopyFromBytes(in4, data, size));
    free(data);
    TVMValue v[2], r;
    int c[2] = {kTVMStr, kTVMNDArrayHandle};
    v[0].v_str = s.f4.inputs[0].name;
    v[1].v_handle = in4;
    OK(call_fn(s.b, "set_input", v, c, 2, &r));
    OK(call_fn(s.b, "run", NULL, NULL, 0, &r));
    v[0].v_int64 = 0;
    c[0] = kDLInt;
    v[1].v_handle = out4;
    OK(call_fn(s.b, "get_output", v, c, 2, &r));
    void* want4 = read_file(s.f4.outputs[0].file, &size);
    CHECK(same_output(out4, want4, size), "the sharer's output differs from upstream's");
    free(want4);
    OK(TVMArrayFree(in4));
    OK(TVMArrayFree(out4));
  }
  fresh_executor_runs(&s);
  return g_failures ? 1 : 0;
}

/* The cases worth trying of a step's `calls` calls of one function: the first, the second and
 * the last (a step's calls of one function are mostly alike in between). */
static int picks(long calls, long out[3]) {
  int k = 0;
  out[k++] = 1;
  if (calls >= 2) out[k++] = 2;
  if (calls >= 3) out[k++] = calls;
  return k;
}

/* One case of the sweep, run in a process of its own (OpenCL state is per process). */
typedef struct {
  char st[32], fn[64];
  long n;
  int persistent;
  pid_t pid;
  char log[64];
} Case;

static void start_case(char** argv, const char* root, const char* shim, Case* c) {
  snprintf(c->log, sizeof c->log, "/tmp/tvmrt-faults-%d-XXXXXX", (int)getpid());
  int fd = mkstemp(c->log);
  c->pid = fork();
  if (c->pid == 0) {
    dup2(fd, 1);
    dup2(fd, 2);
    char nbuf[32], pbuf[8];
    snprintf(nbuf, sizeof nbuf, "%ld", c->n);
    snprintf(pbuf, sizeof pbuf, "%d", c->persistent);
    alarm(60);
    execl(argv[0], argv[0], root, shim, c->st, c->fn, nbuf, pbuf, (char*)NULL);
    _exit(127);
  }
  close(fd);
}

/* Reports a finished case; whether it passed. */
static int finish_case(Case* c, int status) {
  int passed = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!passed) {
    size_t size = 0;
    char* log = read_file(c->log, &size);
    fprintf(stderr, "FAILED: %s, call %ld of %s%s: %s %d\n%.*s\n", c->st, c->n, c->fn,
            c->persistent ? " and every later one" : "", WIFSIGNALED(status) ? "signal" : "exit status",
            WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status), (int)size, log ? log : "");
    free(log);
  }
  unlink(c->log);
  return passed;
}

static int have_opencl(void) {
  TVMFunctionHandle f = NULL;
  if (TVMFuncGetGlobal("runtime.GetDeviceAttr", &f) != 0 || !f) return 0;
  TVMValue v[3], r;
  int c[3] = {kDLInt, kDLInt, kDLInt}, rc = 0;
  v[0].v_int64 = kDLOpenCL;
  v[1].v_int64 = 0;
  v[2].v_int64 = 0; /* kExist */
  int exists = TVMFuncCall(f, v, c, 3, &r, &rc) == 0 && rc == kDLInt && r.v_int64 == 1;
  TVMFuncFree(f);
  return exists;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s FIXTURES/opencl SHIM.so [count | STEP FUNC N PERSISTENT]\n", argv[0]);
    return 2;
  }
  const char *root = argv[1], *shim = argv[2];
  setenv("TVM_RT_OPENCL_LIBRARY", shim, 1);
  void* h = dlopen(shim, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "cannot open %s: %s\n", shim, dlerror());
    return 2;
  }
  shim_fail = (FailFn)dlsym(h, "tvm_rt_cl_shim_fail");
  shim_reset = (ResetFn)dlsym(h, "tvm_rt_cl_shim_reset_counts");
  shim_count = (CountFn)dlsym(h, "tvm_rt_cl_shim_count");
  if (!shim_fail || !shim_reset || !shim_count) return 2;

  if (argc == 4 || argc == 7) {
    if (argc == 4) return session(root, 1, -1, "", 0, 0);
    int which = -1;
    for (int k = 0; k < NUM_STEPS; k++)
      if (!strcmp(argv[3], STEP_NAMES[k])) which = k;
    if (which < 0) return 2;
    return session(root, 0, which, argv[4], atol(argv[5]), atoi(argv[6]));
  }

  if (!have_opencl()) {
    const char* req = getenv("TVM_RT_REQUIRE_OPENCL");
    if (req && !strcmp(req, "1")) {
      fprintf(stderr, "TVM_RT_REQUIRE_OPENCL=1 but no OpenCL device\n");
      return 1;
    }
    printf("no OpenCL device: skipped\n");
    return 77;
  }
  /* The sweep: count each step's calls in a clean session, then fail each in turn. */
  int status = 0;
  pid_t pid;
  int fds[2];
  if (pipe(fds) != 0) return 2;
  if ((pid = fork()) == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    execl(argv[0], argv[0], root, shim, "count", (char*)NULL);
    _exit(127);
  }
  close(fds[1]);
  FILE* counts = fdopen(fds[0], "r");
  char st[32], fn[64];
  long calls;
  struct {
    char st[32], fn[64];
    long calls;
  } list[256];
  int num = 0;
  while (num < 256 && fscanf(counts, "%31s %63s %ld", st, fn, &calls) == 3) {
    snprintf(list[num].st, sizeof list[num].st, "%s", st);
    snprintf(list[num].fn, sizeof list[num].fn, "%s", fn);
    list[num].calls = calls;
    num++;
  }
  fclose(counts);
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || num == 0) {
    fprintf(stderr, "the clean session failed (status %d, %d call kinds counted)\n", status, num);
    return 1;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  static Case cases[1024];
  int total = 0;
  for (int i = 0; i < num; i++) {
    long n[3];
    int k = picks(list[i].calls, n);
    for (int j = 0; j < k && total + 2 <= 1024; j++) {
      for (int persistent = 0; persistent <= 1; persistent++) {
        Case* c = &cases[total++];
        /* Bounded by the fields' size (31 and 63 characters): the scan above stored no more. */
        snprintf(c->st, sizeof c->st, "%.31s", list[i].st);
        snprintf(c->fn, sizeof c->fn, "%.63s", list[i].fn);
        c->n = n[j];
        c->persistent = persistent;
      }
    }
  }
  /* Two at a time (the machines this runs on have two cores or more). */
  int next = 0, running = 0, failed = 0;
  while (next < total || running > 0) {
    while (running < 2 && next < total) {
      start_case(argv, root, shim, &cases[next++]);
      running++;
    }
    pid = waitpid(-1, &status, 0);
    if (pid <= 0) break;
    for (int i = 0; i < next; i++) {
      if (cases[i].pid == pid) {
        failed += !finish_case(&cases[i], status);
        cases[i].pid = 0;
        running--;
      }
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  printf("opencl faults: %d cases over %d (step, call) kinds, %d failed, %.1f s\n", total, num, failed,
         (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
  return failed ? 1 : 0;
}
