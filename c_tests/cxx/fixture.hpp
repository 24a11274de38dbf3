// The fixtures as C++ hosts read them (scripts/make_fixtures.py writes them): the manifest's
// tensors, inputs set from their files, outputs compared with the recorded bytes.
#ifndef TVM_RT_C_TESTS_CXX_FIXTURE_HPP_
#define TVM_RT_C_TESTS_CXX_FIXTURE_HPP_

#include "expect.h"

#include <dlpack/dlpack.h>
#include <tvm/runtime/module.h>
#include <tvm/runtime/ndarray.h>
#include <tvm/runtime/packed_func.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

using tvm::runtime::Module;
using tvm::runtime::NDArray;
using tvm::runtime::PackedFunc;

static std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

struct Tensor {
  std::string name, dtype, file;
  std::vector<int64_t> shape;
};

// The fixture manifest (scripts/make_fixtures.py): input and output tensors with their files.
struct Fixture {
  std::string dir;
  bool factory_weights = true;
  std::vector<Tensor> inputs, outputs;
  explicit Fixture(const std::string& d) : dir(d) {
    std::istringstream lines(ReadFile(d + "/manifest.txt"));
    std::string line;
    while (std::getline(lines, line)) {
      std::istringstream tok(line);
      std::string kind;
      tok >> kind;
      if (kind == "factory_weights") {
        std::string v;
        tok >> v;
        factory_weights = v == "yes";
      } else if (kind == "input" || kind == "output") {
        Tensor t;
        if (kind == "input") tok >> t.name;
        int ndim = 0;
        tok >> t.dtype >> ndim;
        t.shape.resize(ndim);
        for (auto& d : t.shape) tok >> d;
        tok >> t.file;
        t.file = d + "/" + t.file;
        (kind == "input" ? inputs : outputs).push_back(t);
      }
    }
  }
};

static DLDataType ParseDType(const std::string& s) { return tvm::runtime::String2DLDataType(s); }

static void SetInputs(Module gmod, const Fixture& fx) {
  PackedFunc set_input = gmod.GetFunction("set_input");
  DLDevice cpu{kDLCPU, 0};
  for (const auto& t : fx.inputs) {
    NDArray x = NDArray::Empty(tvm::runtime::ShapeTuple(t.shape), ParseDType(t.dtype), cpu);
    std::string bytes = ReadFile(t.file);
    x.CopyFromBytes(bytes.data(), bytes.size());
    set_input(t.name, x);
  }
}

static void CheckOutputs(Module gmod, const Fixture& fx, const char* how) {
  PackedFunc get_output = gmod.GetFunction("get_output");
  int n = gmod.GetFunction("get_num_outputs")();
  EXPECT(n == static_cast<int>(fx.outputs.size()), how);
  for (int k = 0; k < n && k < static_cast<int>(fx.outputs.size()); ++k) {
    NDArray y = get_output(k);
    tvm::runtime::ShapeTuple dims = y.Shape();
    std::vector<int64_t> shape(dims.begin(), dims.end());
    EXPECT(shape == fx.outputs[k].shape, how);
    std::string want = ReadFile(fx.outputs[k].file);
    std::string got(want.size(), '\0');
    y.CopyToBytes(got.data(), got.size());
    EXPECT(got == want, how);
  }
}

#endif  // TVM_RT_C_TESTS_CXX_FIXTURE_HPP_
