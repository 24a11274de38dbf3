// The C example in C++ with the header-only wrapper: batch 1 and batch 8 of one MLP share one copy
// of the weights, and take turns in one activation arena (a pool of one).
// usage: share_example_cpp MODEL_B1_DIR MODEL_B8_DIR
#include <cstdio>
#include <tvm_runtime.hpp>

static void run_and_print(const tvmrt::GraphExecutor& ex, const char* label, int64_t batch) {
  std::vector<float> data(size_t(batch) * 784);
  for (size_t i = 0; i < data.size(); i++) data[i] = float(i % 17) / 17.0f;
  ex.set_input("data", data);
  ex.run();
  std::vector<float> out = ex.get_output(0).to_vector<float>();
  std::printf("%s output[0]:", label);
  for (int i = 0; i < 10; i++) std::printf(" %.4f", out[i]);
  tvmrt::MemoryUsage m = ex.memory_usage();
  std::printf("\n%s memory: weights owned %lld, shared %lld, activations %lld\n", label, (long long)m.weights_owned,
              (long long)m.weights_shared, (long long)m.activations);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MODEL_B1_DIR MODEL_B8_DIR\n", argv[0]);
    return 2;
  }
  try {
    std::string d1 = argv[1], d8 = argv[2];
    auto b1 = tvmrt::GraphExecutor::create(tvmrt::GraphExecutor::read_file(d1 + "/graph.json"),
                                           tvmrt::Module::load(d1 + "/lib.so"));
    auto b8 = tvmrt::GraphExecutor::create(tvmrt::GraphExecutor::read_file(d8 + "/graph.json"),
                                           tvmrt::Module::load(d8 + "/lib.so"));
    std::string params = tvmrt::GraphExecutor::read_file(d1 + "/params.bin");
    b1.load_params(params);
    b8.share_params(b1, params);
    tvmrt::Module pool = tvmrt::GraphExecutor::arena_pool(1);
    b1.join_pool(pool);
    b8.join_pool(pool);
    run_and_print(b1, "batch 1", 1);
    run_and_print(b8, "batch 8", 8);
    try {
      b1.set_input("no_such_input", std::vector<float>(4));
    } catch (const tvmrt::Error& e) {
      std::printf("expected error: %s\n", e.what());
    }
  } catch (const tvmrt::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
