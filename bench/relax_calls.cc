// The cost of one call of a Relax function from a C++ host on tvm-ffi (the function returning
// a new tensor, as `y = x + c` does), on whichever libtvm_runtime.so this is linked with: upstream
// TVM 0.27's or this project's. Prints ns per call, the best of 5 runs of N calls.
//   relax_calls MODEL.so [N]
#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace ffi = tvm::ffi;

struct AlignedAlloc {
  void AllocData(DLTensor* t) {
    if (posix_memalign(&t->data, 64, ffi::GetDataSize(*t)) != 0) t->data = nullptr;
  }
  void FreeData(DLTensor* t) { free(t->data); }
};

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  long n = argc > 2 ? atol(argv[2]) : 200000;
  ffi::Module exe = ffi::Module::LoadFromFile(argv[1]);
  ffi::Module vm = exe->GetFunction("vm_load_executable").value()().cast<ffi::Module>();
  vm->GetFunction("vm_initialization").value()(static_cast<int>(kDLCPU), 0, 2, static_cast<int>(kDLCPU), 0, 2);
  ffi::Function main_fn = vm->GetFunction("main").value();
  int64_t shape[1] = {4};
  ffi::Tensor x = ffi::Tensor::FromNDAlloc(AlignedAlloc(), ffi::ShapeView(shape, 1), DLDataType{kDLFloat, 32, 1},
                                           DLDevice{kDLCPU, 0});
  for (int i = 0; i < 4; ++i) static_cast<float*>(x.data_ptr())[i] = static_cast<float>(i);
  ffi::Tensor y = main_fn(x).cast<ffi::Tensor>();
  if (static_cast<float*>(y.data_ptr())[3] != 4.0f) {
    std::printf("wrong answer %f\n", static_cast<float*>(y.data_ptr())[3]);
    return 1;
  }
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < n; ++i) {
      ffi::Any r = main_fn(x);
    }
    double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / n;
    best = ns < best ? ns : best;
  }
  std::printf("%.0f\n", best);
  return 0;
}
