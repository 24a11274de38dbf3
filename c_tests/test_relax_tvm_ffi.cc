// A C++ host written against tvm-ffi's headers (the apache-tvm-ffi wheel's include/), linked
// against upstream's libtvm_ffi.so and this project's libtvm_runtime.so, as a deployment of TVM
// 0.22+ without Python is: Module::LoadFromFile, vm_load_executable, vm_initialization, a Relax
// function by name. It runs every case of the fixtures given (tests/fixtures/relax/<version>/<model>)
// and compares each output with the bytes of that version's own runtime; then one VM from four
// threads, a wrong call and a kernel's own error (exceptions, and the VM answers after them).
// Built and run by scripts/test_relax_python.sh. Usage: test_relax_tvm_ffi <model dir>...

#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>
#include <tvm/ffi/container/array.h>
#include <tvm/ffi/container/tensor.h>
#include <tvm/ffi/dtype.h>
#include <tvm/ffi/error.h>
#include <tvm/ffi/extra/module.h>
#include <tvm/ffi/function.h>

#include <atomic>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace ffi = tvm::ffi;

namespace {

int failures = 0;

#define CHECK(cond, what)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::cerr << "FAIL " << __LINE__ << ": " << (what) << std::endl;         \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

// Host tensors on 64-byte boundaries, as TVM allocates them.
struct AlignedAlloc {
  void AllocData(DLTensor* t) {
    size_t n = ffi::GetDataSize(*t);
    if (posix_memalign(&t->data, 64, n ? n : 1) != 0) t->data = nullptr;
  }
  void FreeData(DLTensor* t) { free(t->data); }
};

struct Array {
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

struct Case {
  std::vector<Array> inputs, outputs;
};

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// manifest.txt: "input <name> <dtype> <ndim> <dims...> <file>", "output <dtype> <ndim> <dims...> <file>".
std::vector<Case> Manifest(const std::string& dir) {
  std::vector<Case> cases;
  std::istringstream lines(ReadFile(dir + "/manifest.txt"));
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream t(line);
    std::string kind, name;
    t >> kind;
    if (kind == "case") cases.emplace_back();
    if (kind != "input" && kind != "output") continue;
    if (kind == "input") t >> name;
    Array a;
    int ndim = 0;
    t >> a.dtype >> ndim;
    a.shape.resize(ndim);
    for (auto& d : a.shape) t >> d;
    std::string file;
    t >> file;
    a.bytes = ReadFile(dir + "/" + file);
    (kind == "input" ? cases.back().inputs : cases.back().outputs).push_back(a);
  }
  return cases;
}

ffi::Tensor ToTensor(const Array& a) {
  DLDataType dtype = ffi::StringToDLDataType(a.dtype == "bool" ? "bool" : a.dtype);
  ffi::Tensor t = ffi::Tensor::FromNDAlloc(AlignedAlloc(), ffi::ShapeView(a.shape.data(), a.shape.size()), dtype,
                                           DLDevice{kDLCPU, 0});
  memcpy(t.data_ptr(), a.bytes.data(), a.bytes.size());
  return t;
}

void Flatten(const ffi::Any& v, std::vector<ffi::Tensor>* out) {
  if (auto t = v.as<ffi::Tensor>()) {
    out->push_back(*t);
  } else if (auto arr = v.as<ffi::Array<ffi::Any>>()) {
    for (const ffi::Any& x : *arr) Flatten(x, out);
  }
}

bool Same(const ffi::Tensor& got, const Array& want) {
  if (std::string(ffi::DLDataTypeToString(got.dtype())) != want.dtype) return false;
  if (got.ndim() != static_cast<int>(want.shape.size())) return false;
  for (int i = 0; i < got.ndim(); ++i) {
    if (got.shape()[i] != want.shape[i]) return false;
  }
  size_t n = ffi::GetDataSize(*got.GetDLTensorPtr());
  return n == want.bytes.size() && memcmp(got.data_ptr(), want.bytes.data(), n) == 0;
}

ffi::Any Call(const ffi::Function& f, const std::vector<ffi::Tensor>& args) {
  std::vector<ffi::AnyView> views(args.begin(), args.end());
  ffi::Any rv;
  f.CallPacked(views.data(), static_cast<int32_t>(views.size()), &rv);
  return rv;
}

ffi::Module LoadVm(const std::string& dir) {
  ffi::Module exe = ffi::Module::LoadFromFile(dir + "/model.so");
  ffi::Module vm = exe->GetFunction("vm_load_executable").value()().cast<ffi::Module>();
  // (device type, device id, allocator: 2 = pooled), then the host, as upstream's Python passes.
  vm->GetFunction("vm_initialization").value()(static_cast<int>(kDLCPU), 0, 2, static_cast<int>(kDLCPU), 0, 2);
  return vm;
}

bool RunCase(const ffi::Function& main, const Case& c) {
  std::vector<ffi::Tensor> in;
  for (const Array& a : c.inputs) in.push_back(ToTensor(a));
  std::vector<ffi::Tensor> out;
  Flatten(Call(main, in), &out);
  if (out.size() != c.outputs.size()) return false;
  for (size_t i = 0; i < out.size(); ++i) {
    if (!Same(out[i], c.outputs[i])) return false;
  }
  return true;
}

void EveryCase(const std::string& dir) {
  ffi::Module exe = ffi::Module::LoadFromFile(dir + "/model.so");
  CHECK(std::string(exe->kind()) == "relax.VMExecutable", dir + ": the executable's kind");
  CHECK(!exe->GetFunction("no_such_function").has_value(), dir + ": an unknown function is none");
  CHECK(exe->ImplementsFunction("vm_load_executable"), dir + ": implements vm_load_executable");
  ffi::Module vm = LoadVm(dir);
  ffi::Function main = vm->GetFunction("main").value();
  std::vector<Case> cases = Manifest(dir);
  for (size_t i = 0; i < cases.size(); ++i) {
    CHECK(RunCase(main, cases[i]), dir + ": case " + std::to_string(i));
  }
  std::cout << dir << ": " << cases.size() << " cases" << std::endl;
}

void Threads(const std::string& dir) {
  ffi::Module vm = LoadVm(dir);
  ffi::Function main = vm->GetFunction("main").value();
  std::vector<Case> cases = Manifest(dir);
  std::atomic<int> wrong{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        try {
          if (!RunCase(main, cases[(t + i) % cases.size()])) ++wrong;
        } catch (const std::exception&) {
          ++errors;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(wrong == 0 && errors == 0, dir + ": one VM from 4 threads x 500 calls: " + std::to_string(wrong.load()) +
                                       " wrong, " + std::to_string(errors.load()) + " errors");
}

void Errors(const std::string& dir) {
  ffi::Module vm = LoadVm(dir);
  ffi::Function main = vm->GetFunction("main").value();
  std::vector<Case> cases = Manifest(dir);
  std::string message;
  try {
    Call(main, {ToTensor(cases[0].inputs[0])});
  } catch (const ffi::Error& e) {
    message = e.message();
  }
  CHECK(message.find("arguments") != std::string::npos, "a wrong argument count: '" + message + "'");
  // A kernel's own check, raised through TVMFFIErrorSetRaisedFromCStrParts (bound to this runtime
  // when it comes first in the host's libraries, as here, and passed on to libtvm_ffi).
  ffi::Module exe = ffi::Module::LoadFromFile(dir + "/model.so");
  ffi::Module lib = exe->imports()[0].cast<ffi::Module>();
  message.clear();
  try {
    lib->GetFunction("matmul").value()(ToTensor(cases[0].inputs[0]));
  } catch (const ffi::Error& e) {
    message = e.message();
  }
  CHECK(message.find("matmul") != std::string::npos, "a kernel's error: '" + message + "'");
  CHECK(RunCase(main, cases[0]), "the VM answers after the errors");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: " << argv[0] << " <model dir>..." << std::endl;
    return 2;
  }
  std::string mlp_args;
  for (int i = 1; i < argc; ++i) {
    std::string dir = argv[i];
    try {
      EveryCase(dir);
    } catch (const std::exception& e) {
      CHECK(false, dir + ": " + e.what());
    }
    if (dir.size() >= 8 && dir.compare(dir.size() - 8, 8, "mlp_args") == 0) mlp_args = dir;
  }
  if (!mlp_args.empty()) {
    try {
      Threads(mlp_args);
      Errors(mlp_args);
    } catch (const std::exception& e) {
      CHECK(false, std::string("threads and errors: ") + e.what());
    }
  }
  std::cout << (failures ? "FAILED" : "ok") << " (" << failures << " failures)" << std::endl;
  return failures ? 1 : 0;
}
