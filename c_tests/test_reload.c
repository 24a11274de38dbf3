/* One library file loaded twice shares one image and one context slot. Its operators look
 * functions up by name (tvm.contrib.sort.*): after the second load is freed, the first must keep
 * working. Run under valgrind by CTest. usage: test_reload SORT_FIXTURE_DIR */
#include "executor.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  Fixture fx;
  CHECK(load_fixture(argv[1], &fx) == 0, "manifest");
  char path[700];
  snprintf(path, sizeof path, "%s/lib.so", argv[1]);
  TVMModuleHandle a = NULL, b = NULL;
  OK(TVMModLoadFromFile(path, "", &a));
  TVMModuleHandle ga = create_from_factory(a);
  OK(TVMModLoadFromFile(path, "", &b));
  TVMModuleHandle gb = create_from_factory(b);
  OK(TVMModFree(gb));
  OK(TVMModFree(b)); /* the image's context must not go with the second load */
  if (ga) run_and_check(ga, &fx, "first load, second freed");
  OK(TVMModFree(a));
  if (ga) run_and_check(ga, &fx, "library handle freed, executor alive");
  OK(TVMModFree(ga));
  /* And a fresh load after everything was freed. */
  OK(TVMModLoadFromFile(path, "", &a));
  ga = create_from_factory(a);
  if (ga) run_and_check(ga, &fx, "reloaded");
  OK(TVMModFree(ga));
  OK(TVMModFree(a));
  if (g_failures) {
    fprintf(stderr, "%d checks failed\n", g_failures);
    return 1;
  }
  printf("reload ok\n");
  return 0;
}
