// The C example through the header-only wrapper include/tvm_runtime.hpp: runs a model TVM compiled
// for the graph executor, and other builds of it sharing its weights and one activation arena.
//
//   run_model_cpp MODEL_DIR [OTHER_BUILD_DIR...]
//
// MODEL_DIR holds lib.so, graph.json and params.bin (a folder of any other form: examples/c's
// run_model reads every one the tool reads, and run_vm a Relay VM). The model's inputs beyond its weights (names
// from input_names(); shapes and dtypes from get_input) are filled with a fixed pattern, the model
// runs, and every output is printed. Each OTHER_BUILD_DIR (another batch size, say) shares the first
// executor's weights, one copy for all, and takes turns with it in one activation arena.
#include <cstdio>
#include <filesystem>
#include <tvm_runtime.hpp>

// Calls f with a typed pointer to the array's host copy, for the dtypes a model's tensors have.
template <typename F>
static void with_typed(tvmrt::DataType t, void* data, F&& f) {
  switch (t.code * 1000 + t.bits) {
    case kDLFloat * 1000 + 32: return f(static_cast<float*>(data));
    case kDLFloat * 1000 + 64: return f(static_cast<double*>(data));
    case kDLInt * 1000 + 8: return f(static_cast<int8_t*>(data));
    case kDLInt * 1000 + 16: return f(static_cast<int16_t*>(data));
    case kDLInt * 1000 + 32: return f(static_cast<int32_t*>(data));
    case kDLInt * 1000 + 64: return f(static_cast<int64_t*>(data));
    case kDLUInt * 1000 + 1:  // bool: a byte per element
    case kDLUInt * 1000 + 8: return f(static_cast<uint8_t*>(data));
    case kDLUInt * 1000 + 16: return f(static_cast<uint16_t*>(data));
    case kDLUInt * 1000 + 32: return f(static_cast<uint32_t*>(data));
    case kDLUInt * 1000 + 64: return f(static_cast<uint64_t*>(data));
    default: throw tvmrt::Error("unsupported dtype code " + std::to_string(t.code) + " bits " + std::to_string(t.bits));
  }
}

static size_t element_bytes(tvmrt::DataType t) { return t.bits < 8 ? 1 : t.bits / 8; }

static void print(const std::string& label, const tvmrt::NDArray& a) {
  std::vector<unsigned char> host(a.num_elements() * element_bytes(a.dtype()) + 1);
  a.copy_to(host.data(), host.size() - 1);
  std::printf("%s [", label.c_str());
  auto shape = a.shape();
  for (size_t i = 0; i < shape.size(); i++) std::printf(i ? ",%lld" : "%lld", (long long)shape[i]);
  std::printf("]");
  with_typed(a.dtype(), host.data(), [&](auto* v) {
    for (size_t i = 0; i < a.num_elements() && i < 6; i++) std::printf(" %.6g", double(v[i]));
  });
  std::printf(a.num_elements() > 6 ? " ...\n" : "\n");
}

static void run_and_print(const tvmrt::GraphExecutor& ex, const std::string& label,
                          const std::vector<std::string>& inputs) {
  for (const std::string& name : inputs) {
    tvmrt::NDArray in = ex.get_input(name);  // the executor's own input: its shape and dtype
    std::vector<unsigned char> host(in.num_elements() * element_bytes(in.dtype()) + 1);
    bool is_float = in.dtype().code == kDLFloat;
    with_typed(in.dtype(), host.data(), [&](auto* v) {
      using T = std::remove_pointer_t<decltype(v)>;
      for (size_t i = 0; i < in.num_elements(); i++)
        v[i] = is_float ? T(double(i % 17) / 17.0) : T(i % (in.dtype().bits == 1 ? 2 : 7));
    });
    in.copy_from(host.data(), host.size() - 1);
    print(label + " input " + name, in);
  }
  ex.run();
  for (int i = 0; i < ex.num_outputs(); i++) print(label + " output " + std::to_string(i), ex.get_output(i));
  tvmrt::MemoryUsage m = ex.memory_usage();
  std::printf("%s memory: weights owned %lld, shared %lld, activations %lld, shared %lld\n", label.c_str(),
              (long long)m.weights_owned, (long long)m.weights_shared, (long long)m.activations,
              (long long)m.activations_shared);
}

// The three files this example reads, or an error saying which is missing and what reads the rest.
static void check_folder(const std::string& dir) {
  for (const char* name : {"lib.so", "graph.json", "params.bin"}) {
    if (!std::filesystem::is_regular_file(std::filesystem::path(dir) / name)) {
      throw tvmrt::Error(dir + " has no " + name + ": this example wants relay.build's three files (lib.so, " +
                         "graph.json, params.bin); examples/c's run_model reads every folder form, run_vm a Relay VM");
    }
  }
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL_DIR [OTHER_BUILD_DIR...]\n", argv[0]);
    return 2;
  }
  try {
    auto load = [](const std::string& dir) {
      check_folder(dir);
      return tvmrt::GraphExecutor::create(tvmrt::GraphExecutor::read_file(dir + "/graph.json"),
                                          tvmrt::Module::load(dir + "/lib.so"));
    };
    check_folder(argv[1]);
    std::string params = tvmrt::GraphExecutor::read_file(std::string(argv[1]) + "/params.bin");
    tvmrt::GraphExecutor first = load(argv[1]);
    first.load_params(params);
    std::vector<std::string> inputs = first.input_names();  // after load_params: the data inputs
    tvmrt::Module pool = tvmrt::GraphExecutor::arena_pool(1);
    first.join_pool(pool);
    run_and_print(first, "executor 0", inputs);
    for (int k = 2; k < argc; k++) {
      tvmrt::GraphExecutor other = load(argv[k]);
      other.share_params(first, params);  // one copy of the weights for all
      other.join_pool(pool);              // and one activation arena, taken in turns
      run_and_print(other, "executor " + std::to_string(k - 1), inputs);
    }
    try {
      first.get_input("no_such_input");
    } catch (const tvmrt::Error& e) {
      std::printf("expected error: %s\n", e.what());
    }
  } catch (const tvmrt::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
