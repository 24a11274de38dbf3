/* Runs fixtures through the C API, both creation paths, and compares every output with upstream's
 * reference bytes. Built twice: against this project's header and against upstream TVM 0.16's
 * c_runtime_api.h (USE_UPSTREAM_HEADERS), linked with this library either way.
 * usage: test_models FIXTURE_DIR... */
#include "executor.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FIXTURE_DIR...\n", argv[0]);
    return 2;
  }
  for (int i = 1; i < argc; i++) {
    Fixture fx;
    CHECK(load_fixture(argv[i], &fx) == 0, "cannot read the manifest in %s", argv[i]);
    char lib_path[700];
    snprintf(lib_path, sizeof lib_path, "%s/lib.so", argv[i]);
    TVMModuleHandle lib = NULL;
    OK(TVMModLoadFromFile(lib_path, "", &lib));
    if (!lib) continue;

    TVMModuleHandle g1 = create_from_factory(lib);
    if (g1) {
      if (!fx.factory_weights) load_params(g1, argv[i]);
      run_and_check(g1, &fx, "factory");
    }
    TVMModuleHandle g2 = create_from_json(lib, argv[i]);
    if (g2) {
      load_params(g2, argv[i]);
      run_and_check(g2, &fx, "create");
    }
    /* Free the library first: executors keep what they need alive. */
    OK(TVMModFree(lib));
    if (g1) run_and_check(g1, &fx, "factory, library freed");
    OK(TVMModFree(g1));
    OK(TVMModFree(g2));
    printf("%-40s ok\n", argv[i]);
  }
  if (g_failures) {
    fprintf(stderr, "%d checks failed\n", g_failures);
    return 1;
  }
  return 0;
}
