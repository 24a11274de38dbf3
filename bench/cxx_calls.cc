// C++ host overhead per call, written against upstream's headers: a PackedFunc call that returns
// an int, set_input of a tensor by name, and run of the MLP; the same binary runs on either runtime
// (LD_LIBRARY_PATH). Build and run: bench/cxx_calls.sh
#include <tvm/runtime/module.h>
#include <tvm/runtime/packed_func.h>
#include <tvm/runtime/registry.h>
#include <tvm/runtime/ndarray.h>
#include <chrono>
#include <cstdio>
int main(int argc, char** argv) {
  std::string dir = argv[1];
  DLDevice dev{kDLCPU, 0};
  tvm::runtime::Module lib = tvm::runtime::Module::LoadFromFile(dir + "/lib.so");
  tvm::runtime::Module gmod = lib.GetFunction("default")(dev);
  tvm::runtime::PackedFunc n_out = gmod.GetFunction("get_num_outputs");
  tvm::runtime::PackedFunc run = gmod.GetFunction("run");
  tvm::runtime::PackedFunc set_input = gmod.GetFunction("set_input");
  tvm::runtime::NDArray x = tvm::runtime::NDArray::Empty({1, 1, 28, 28}, DLDataType{kDLFloat, 32, 1}, dev);
  for (int round = 0; round < 3; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    int64_t s = 0;
    for (int i = 0; i < 1000000; ++i) s += static_cast<int64_t>(n_out());
    auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < 100000; ++i) set_input("data", x);
    auto t2 = std::chrono::steady_clock::now();
    for (int i = 0; i < 20000; ++i) run();
    auto t3 = std::chrono::steady_clock::now();
    std::printf("call %.1f ns  set_input %.1f ns  run %.2f us (%lld)\n",
      std::chrono::duration<double, std::nano>(t1 - t0).count() / 1e6,
      std::chrono::duration<double, std::nano>(t2 - t1).count() / 1e5,
      std::chrono::duration<double, std::micro>(t3 - t2).count() / 2e4, (long long)s);
  }
}
