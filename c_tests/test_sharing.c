/* share_params through the C API: batch 8 on batch 1's weights, freed in every order; executors
 * of one factory. Run under valgrind by CTest. usage: test_sharing FIXTURES_DIR */
#include "executor.h"

static TVMModuleHandle load_lib(const char* dir) {
  char path[700];
  snprintf(path, sizeof path, "%s/lib.so", dir);
  TVMModuleHandle lib = NULL;
  OK(TVMModLoadFromFile(path, "", &lib));
  return lib;
}

static void share(TVMModuleHandle dst, TVMModuleHandle src, const char* params_dir) {
  char path[700];
  size_t size = 0;
  snprintf(path, sizeof path, "%s/params.bin", params_dir);
  void* blob = read_file(path, &size);
  share_params_blob(dst, src, blob, size);
  free(blob);
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  char d1[600], d8[600], dm[600];
  snprintf(d1, sizeof d1, "%s/mlp_unbound_b1", argv[1]);
  snprintf(d8, sizeof d8, "%s/mlp_unbound_b8", argv[1]);
  snprintf(dm, sizeof dm, "%s/mlp_b1", argv[1]);
  Fixture f1, f8, fm;
  CHECK(load_fixture(d1, &f1) == 0 && load_fixture(d8, &f8) == 0 && load_fixture(dm, &fm) == 0, "fixtures");

  for (int order = 0; order < 3; order++) {
    TVMModuleHandle lib1 = load_lib(d1), lib8 = load_lib(d8);
    TVMModuleHandle m1 = create_from_json(lib1, d1);
    load_params(m1, d1);
    TVMModuleHandle m8 = create_from_json(lib8, d8);
    share(m8, m1, d8);
    if (order == 0) { /* source first */
      OK(TVMModFree(m1));
      OK(TVMModFree(lib1));
      run_and_check(m8, &f8, "shared, source freed");
      OK(TVMModFree(m8));
      OK(TVMModFree(lib8));
    } else if (order == 1) { /* sharer first */
      run_and_check(m8, &f8, "shared");
      OK(TVMModFree(lib8));
      OK(TVMModFree(m8));
      run_and_check(m1, &f1, "source after the sharer went");
      OK(TVMModFree(m1));
      OK(TVMModFree(lib1));
    } else { /* libraries first */
      OK(TVMModFree(lib1));
      OK(TVMModFree(lib8));
      run_and_check(m1, &f1, "source, libraries freed");
      run_and_check(m8, &f8, "shared, libraries freed");
      OK(TVMModFree(m1));
      OK(TVMModFree(m8));
    }
  }

  /* Three executors of one factory; the factory goes first. */
  TVMModuleHandle lib = load_lib(dm);
  TVMModuleHandle g[3];
  for (int i = 0; i < 3; i++) g[i] = create_from_factory(lib);
  OK(TVMModFree(lib));
  for (int i = 0; i < 3; i++) run_and_check(g[i], &fm, "factory executor");
  for (int i = 0; i < 3; i++) OK(TVMModFree(g[i]));

  if (g_failures) {
    fprintf(stderr, "%d checks failed\n", g_failures);
    return 1;
  }
  printf("sharing ok\n");
  return 0;
}
