/* 1000 load/create/run/free cycles: resident memory returns to where it was after warm-up.
 * usage: test_cycles MLP_FIXTURE_DIR */
#include "executor.h"

static long rss_kb(void) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long kb = -1;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmRSS: %ld", &kb) == 1) break;
  if (f) fclose(f);
  return kb;
}

static void cycle(const char* dir, const Fixture* fx) {
  char path[700];
  snprintf(path, sizeof path, "%s/lib.so", dir);
  TVMModuleHandle lib = NULL;
  OK(TVMModLoadFromFile(path, "", &lib));
  TVMModuleHandle g = create_from_factory(lib);
  if (g) run_and_check(g, fx, "cycle");
  OK(TVMModFree(g));
  OK(TVMModFree(lib));
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  Fixture fx;
  CHECK(load_fixture(argv[1], &fx) == 0, "manifest");
  for (int i = 0; i < 50; i++) cycle(argv[1], &fx);
  long before = rss_kb();
  for (int i = 0; i < 1000 && !g_failures; i++) cycle(argv[1], &fx);
  long after = rss_kb();
  printf("VmRSS after warm-up %ld kB, after 1000 more cycles %ld kB\n", before, after);
  CHECK(after - before < 1024, "resident memory grew by %ld kB over 1000 cycles", after - before);
  return g_failures ? 1 : 0;
}
