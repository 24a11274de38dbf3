// A C++ host written against TVM 0.16's own C++ headers, the way upstream's deploy examples teach,
// compiled unchanged and linked against libtvm_runtime.so. CTest runs the same binary against this
// library and against upstream's (LD_LIBRARY_PATH), so any difference shows as a failure of one.
// usage: test_cxx_host FIXTURES_DIR
#include "expect.h"
#include "fixture.hpp"

#include <dlpack/dlpack.h>
#include <tvm/runtime/container/adt.h>
#include <tvm/runtime/container/array.h>
#include <tvm/runtime/container/map.h>
#include <tvm/runtime/logging.h>
#include <tvm/runtime/module.h>
#include <tvm/runtime/ndarray.h>
#include <tvm/runtime/packed_func.h>
#include <tvm/runtime/registry.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

using tvm::runtime::Module;
using tvm::runtime::NDArray;
using tvm::runtime::PackedFunc;
using tvm::runtime::Registry;


// The deploy example: the factory's "default", then set_input / run / get_output.
static void FactoryPath(const std::string& dir) {
  Fixture fx(dir);
  if (!fx.factory_weights) return;
  DLDevice cpu{kDLCPU, 0};
  Module lib = Module::LoadFromFile(dir + "/lib.so");
  Module gmod = lib.GetFunction("default")(cpu);
  SetInputs(gmod, fx);
  gmod.GetFunction("run")();
  CheckOutputs(gmod, fx, (dir + " through the factory").c_str());
}

// tvm.graph_executor.create from the registry, load_params from bytes, and share_params, on
// device type `device` (id 0).
static void CreatePath(const std::string& dir, int device = kDLCPU) {
  Fixture fx(dir);
  const PackedFunc* create = Registry::Get("tvm.graph_executor.create");
  EXPECT(create != nullptr, "tvm.graph_executor.create is registered");
  if (!create) return;
  Module lib = Module::LoadFromFile(dir + "/lib.so");
  std::string json = ReadFile(dir + "/graph.json");
  std::string params = ReadFile(dir + "/params.bin");
  TVMByteArray blob{params.data(), params.size()};
  Module a = (*create)(json, lib, device, 0);
  a.GetFunction("load_params")(blob);
  Module b = (*create)(json, lib, device, 0);
  b.GetFunction("share_params")(a, blob);
  for (Module m : {a, b}) {
    SetInputs(m, fx);
    m.GetFunction("run")();
    CheckOutputs(m, fx, (dir + " through create").c_str());
  }
}

static void Errors(const std::string& dir) {
  DLDevice cpu{kDLCPU, 0};
  Module lib = Module::LoadFromFile(dir + "/lib.so");
  Module gmod = lib.GetFunction("default")(cpu);
  bool caught = false;
  try {
    gmod.GetFunction("get_output")(99);
  } catch (const tvm::Error& e) {
    caught = std::strstr(e.what(), "99") != nullptr;
  }
  EXPECT(caught, "a failing call throws tvm::Error with the message");
  caught = false;
  try {
    Module::LoadFromFile(dir + "/no_such_lib.so");
  } catch (const std::exception& e) {
    caught = std::strstr(e.what(), "no_such_lib.so") != nullptr;
  }
  EXPECT(caught, "a missing library throws, caught as std::exception");
  EXPECT(gmod.GetFunction("no_such_function") == nullptr, "an unknown function is a null PackedFunc");
}

// Registered by a static initializer, before main, as TVM's own sources do.
TVM_REGISTER_GLOBAL("test.cxx.twice").set_body_typed([](int x) { return 2 * x; });

// Host functions registered in the library's registry and called back, including ones that throw.
static void Callbacks() {
  const PackedFunc* twice = Registry::Get("test.cxx.twice");
  EXPECT(twice && static_cast<int>((*twice)(21)) == 42, "TVM_REGISTER_GLOBAL in the host, before main");
  Registry::Register("test.cxx.add", true).set_body([](tvm::runtime::TVMArgs args, tvm::runtime::TVMRetValue* rv) {
    int64_t a = args[0], b = args[1];
    *rv = a + b;
  });
  Registry::Register("test.cxx.greet", true).set_body_typed([](std::string who) { return "hello " + who; });
  Registry::Register("test.cxx.boom", true).set_body([](tvm::runtime::TVMArgs, tvm::runtime::TVMRetValue*) {
    LOG(FATAL) << "boom from the host";
  });
  const PackedFunc* add = Registry::Get("test.cxx.add");
  EXPECT(add && static_cast<int64_t>((*add)(40, 2)) == 42, "a host function called through the registry");
  const PackedFunc* greet = Registry::Get("test.cxx.greet");
  std::string greeting = greet ? (*greet)("tvm").operator std::string() : "";
  EXPECT(greeting == "hello tvm", "strings both ways");
  bool caught = false;
  try {
    (*Registry::Get("test.cxx.boom"))();
  } catch (const tvm::Error& e) {
    caught = std::strstr(e.what(), "boom from the host") != nullptr;
  }
  EXPECT(caught, "a host exception crosses the library and comes back as tvm::Error");
  // The C API sees the same functions, and a throwing one fails cleanly with its message.
  TVMFunctionHandle f = nullptr;
  EXPECT(TVMFuncGetGlobal("test.cxx.boom", &f) == 0 && f != nullptr, "visible to the C API");
  TVMValue rv;
  int code = 0;
  EXPECT(TVMFuncCall(f, nullptr, nullptr, 0, &rv, &code) == -1, "-1 from the C API");
  EXPECT(std::strstr(TVMGetLastError(), "boom from the host") != nullptr, TVMGetLastError());
  TVMFuncFree(f);
  EXPECT(Registry::Remove("test.cxx.add"), "Remove reports a registered name");
  EXPECT(Registry::Get("test.cxx.add") == nullptr, "removed");
  auto names = Registry::ListNames();
  bool listed = false;
  for (const auto& n : names) listed |= n == "tvm.graph_executor.create";
  EXPECT(listed, "ListNames lists the executor constructor");
}

// A module defined by the host: it derives from the library's ModuleNode (its vtable and typeinfo
// come from the library) and answers GetFunction itself.
class GreeterNode : public tvm::runtime::ModuleNode {
 public:
  const char* type_key() const final { return "greeter"; }
  PackedFunc GetFunction(const tvm::runtime::String& name,
                         const tvm::runtime::ObjectPtr<tvm::runtime::Object>& sptr_to_self) final {
    if (name == "greet") {
      return PackedFunc([](tvm::runtime::TVMArgs args, tvm::runtime::TVMRetValue* rv) {
        *rv = std::string("hi ") + args[0].operator std::string();
      });
    }
    return PackedFunc();
  }
};

static void Modules(const std::string& dir) {
  Module host(tvm::runtime::make_object<GreeterNode>());
  EXPECT(std::string(host->type_key()) == "greeter", "a host module's own type key");
  PackedFunc greet = host.GetFunction("greet");
  EXPECT(greet != nullptr && greet("you").operator std::string() == "hi you", "a host module's function");
  EXPECT(host->ImplementsFunction("greet") && !host->ImplementsFunction("nope"), "ImplementsFunction");
  DLDevice cpu{kDLCPU, 0};
  Module lib = Module::LoadFromFile(dir + "/lib.so");
  Module gmod = lib.GetFunction("default")(cpu);
  // A host module handed to the library: as an argument, and imported into a loaded library.
  const PackedFunc* key_of = Registry::Get("runtime.ModuleGetTypeKey");
  EXPECT(key_of && (*key_of)(host).operator std::string() == "greeter", "the library sees a host module's type key");
  const PackedFunc* get_fn = Registry::Get("runtime.ModuleGetFunction");
  PackedFunc via_library = get_fn ? (*get_fn)(host, "greet", false).operator PackedFunc() : PackedFunc();
  EXPECT(via_library != nullptr && via_library("me").operator std::string() == "hi me",
         "the library finds a host module's function");
  lib.Import(host);
  PackedFunc imported = lib.GetFunction("greet", true);
  EXPECT(imported != nullptr && imported("all").operator std::string() == "hi all", "found through an import");
  bool listed = false;
  for (const Module& m : lib->imports()) listed |= std::string(m->type_key()) == "greeter";
  EXPECT(listed, "imports() lists the imported host module");
  // Virtual calls on the library's own modules go through the vtable they carry.
  EXPECT(std::string(gmod->type_key()) == "GraphExecutor", gmod->type_key());
  EXPECT(gmod->ImplementsFunction("run") && !gmod->ImplementsFunction("nope"), "ImplementsFunction on ours");
  const PackedFunc* env = gmod->GetFuncFromEnv("runtime.String");
  EXPECT(env && (*env)("abc").operator tvm::runtime::String() == "abc", "GetFuncFromEnv falls back to the registry");
  bool missing = false;
  try {
    gmod->GetFuncFromEnv("no.such.function");
  } catch (const tvm::Error&) {
    missing = true;
  }
  EXPECT(missing, "GetFuncFromEnv of an unknown name throws");
  std::ostringstream shown;
  shown << gmod;
  EXPECT(shown.str().find("GraphExecutor") != std::string::npos, shown.str().c_str());
}

// Calls `f` on the given objects.
static tvm::runtime::TVMRetValue CallOn(const PackedFunc& f, const std::vector<tvm::runtime::ObjectRef>& items) {
  std::vector<TVMValue> values(items.size() + 1);
  std::vector<int> codes(items.size() + 1);
  tvm::runtime::TVMArgsSetter setter(values.data(), codes.data());
  for (size_t i = 0; i < items.size(); ++i) setter(i, items[i]);
  tvm::runtime::TVMRetValue rv;
  f.CallPacked(tvm::runtime::TVMArgs(values.data(), codes.data(), static_cast<int>(items.size())), &rv);
  return rv;
}

// Maps and arrays the library makes, read by the headers' inline code (lookup and iteration), and
// ones the host makes, read by the library, from empty to 1000 entries.
static void Containers(const std::string& dir) {
  using tvm::runtime::Array;
  using tvm::runtime::Map;
  using tvm::runtime::String;
  const PackedFunc* make_map = Registry::Get("runtime.Map");
  const PackedFunc* make_array = Registry::Get("runtime.Array");
  const PackedFunc* map_size = Registry::Get("runtime.MapSize");
  const PackedFunc* map_get = Registry::Get("runtime.MapGetItem");
  const PackedFunc* array_size = Registry::Get("runtime.ArraySize");
  EXPECT(make_map && make_array && map_size && map_get && array_size, "container functions registered");
  if (!make_map || !make_array || !map_size || !map_get || !array_size) return;
  for (int n : {0, 1, 2, 4, 5, 16, 17, 100, 1000}) {
    std::vector<tvm::runtime::ObjectRef> kv;
    for (int i = 0; i < n; ++i) {
      kv.push_back(String("key" + std::to_string(i)));
      kv.push_back(String("value" + std::to_string(i)));
    }
    Map<String, String> m = CallOn(*make_map, kv);
    EXPECT(static_cast<int>(m.size()) == n, ("map size " + std::to_string(n)).c_str());
    int found = 0, seen = 0;
    for (int i = 0; i < n; ++i) {
      auto it = m.find(String("key" + std::to_string(i)));
      found += it != m.end() && (*it).second == "value" + std::to_string(i);
    }
    for (const auto& pair : m) seen += pair.first.size() > 3 && pair.second.size() > 5;
    EXPECT(found == n && seen == n, ("map lookups and iteration at size " + std::to_string(n)).c_str());
    EXPECT(m.count(String("missing")) == 0, "a missing key");
    // A map the host made, read by the library.
    Map<String, String> mine;
    for (int i = 0; i < n; ++i) mine.Set(String("k" + std::to_string(i)), String("v" + std::to_string(i)));
    int64_t size = CallOn(*map_size, {mine});
    EXPECT(size == n, ("the library reads a host map of size " + std::to_string(n)).c_str());
    if (n > 0) {
      String last = CallOn(*map_get, {mine, String("k" + std::to_string(n - 1))}).operator String();
      EXPECT(last == "v" + std::to_string(n - 1), "the library looks up a host map");
    }
    std::vector<tvm::runtime::ObjectRef> items(kv.begin(), kv.begin() + n);
    Array<String> a = CallOn(*make_array, items);
    bool same = static_cast<int>(a.size()) == n;
    for (int i = 0; same && i < n; ++i) same = a[i] == (i % 2 ? "value" : "key") + std::to_string(i / 2);
    EXPECT(same, ("array of size " + std::to_string(n)).c_str());
    Array<String> host_array(items.size(), String("x"));
    int64_t asize = CallOn(*array_size, {host_array});
    EXPECT(asize == n, "the library reads a host array");
  }
  // get_input_info: a map of maps, as an executor gives it.
  Fixture fx(dir);
  Module lib = Module::LoadFromFile(dir + "/lib.so");
  Module gmod = (*Registry::Get("tvm.graph_executor.create"))(ReadFile(dir + "/graph.json"), lib,
                                                                 static_cast<int>(kDLCPU), 0);
  Map<String, tvm::runtime::ObjectRef> info = gmod.GetFunction("get_input_info")();
  auto shapes = tvm::runtime::Downcast<Map<String, tvm::runtime::ShapeTuple>>(info["shape"]);
  auto dtypes = tvm::runtime::Downcast<Map<String, String>>(info["dtype"]);
  EXPECT(shapes.size() == dtypes.size() && shapes.size() >= 1, "input info has shapes and dtypes");
  auto data = shapes.find(String("data"));
  EXPECT(data != shapes.end() && (*data).second.size() == 4 && (*data).second[1] == 1, "the data input's shape");
  EXPECT(dtypes.at(String("data")) == "float32", "the data input's dtype");
}

static void Arrays() {
  DLDevice cpu{kDLCPU, 0};
  NDArray a = NDArray::Empty({2, 3}, DLDataType{kDLFloat, 32, 1}, cpu);
  float v[6] = {1, 2, 3, 4, 5, 6};
  a.CopyFromBytes(v, sizeof v);
  NDArray view = a.CreateView({3, 2}, DLDataType{kDLFloat, 32, 1});
  EXPECT(view.Shape()[0] == 3 && view->data == a->data, "a view shares memory");
  NDArray b = NDArray::Empty({2, 3}, DLDataType{kDLFloat, 32, 1}, cpu);
  b.CopyFrom(a);
  float w[6] = {0};
  b.CopyToBytes(w, sizeof w);
  EXPECT(std::memcmp(v, w, sizeof v) == 0, "CopyFrom then CopyToBytes");
  DLManagedTensor* dl = a.ToDLPack();
  NDArray back = NDArray::FromDLPack(dl);
  EXPECT(back->data == a->data && back.Shape()[1] == 3, "DLPack out and back in, no copy");
  EXPECT(a.use_count() >= 1, "counts are readable");
  NDArray c = a.CopyTo(cpu);
  EXPECT(c->data != a->data && c.DataType() == tvm::runtime::DataType::Float(32), "CopyTo and DataType");
  alignas(64) float ext[6] = {6, 5, 4, 3, 2, 1};
  int64_t ext_shape[2] = {2, 3};
  DLTensor t{ext, cpu, 2, DLDataType{kDLFloat, 32, 1}, ext_shape, nullptr, 0};
  NDArray wrapped = NDArray::FromExternalDLTensor(t);
  EXPECT(wrapped->data == ext, "FromExternalDLTensor uses the memory in place");
  NDArray fresh = NDArray::NewFromDLTensor(&t, cpu);
  float back2[6] = {0};
  fresh.CopyToBytes(back2, sizeof back2);
  EXPECT(fresh->data != ext && std::memcmp(back2, ext, sizeof ext) == 0, "NewFromDLTensor copies");
  EXPECT(NDArray::AbilityOfZeroCopyForDLTensor(&t, cpu), "an aligned compact tensor can be used in place");
  // Memory scopes: "global" is the default memory; a texture scope on the CPU is refused by both.
  NDArray g = NDArray::Empty({2, 3}, DLDataType{kDLFloat, 32, 1}, cpu, tvm::runtime::String("global"));
  EXPECT(g.Shape()[1] == 3, "the global scope");
  bool refused = false;
  try {
    NDArray::Empty({2, 3, 4}, DLDataType{kDLFloat, 32, 1}, cpu, tvm::runtime::String("global.texture"));
  } catch (const std::exception& e) {
    refused = std::strstr(e.what(), "global.texture") != nullptr;
  }
  EXPECT(refused, "a texture scope on the CPU is refused, naming the scope");
}

static void ObjectProtocol() {
  using tvm::runtime::Object;
  EXPECT(Object::TypeKey2Index("runtime.NDArray") == 2, "static index of NDArray");
  EXPECT(Object::TypeIndex2Key(7) == "runtime.PackedFunc", "key of index 7");
  DLDevice cpu{kDLCPU, 0};
  tvm::runtime::ObjectRef a = NDArray::Empty({1}, DLDataType{kDLFloat, 32, 1}, cpu);
  EXPECT(a->IsInstance<NDArray::Container>(), "IsInstance of an array");
  EXPECT(!a->IsInstance<tvm::runtime::ModuleNode>(), "not a module");
  EXPECT(a->GetTypeKey() == "runtime.NDArray", "type key through the object");
}

static void Logging() {
  bool caught = false;
  try {
    ICHECK_EQ(1, 2) << "one is not two";
  } catch (const tvm::runtime::InternalError& e) {
    caught = std::strstr(e.what(), "one is not two") != nullptr;
  }
  EXPECT(caught, "ICHECK throws InternalError with the message");
  caught = false;
  try {
    LOG(FATAL) << "fatal " << 7;
  } catch (const tvm::Error& e) {
    caught = std::strstr(e.what(), "fatal 7") != nullptr;
  }
  EXPECT(caught, "LOG(FATAL) throws tvm::Error");
  EXPECT(tvm::runtime::DLDataType2String(DLDataType{kDLFloat, 16, 4}) == "float16x4", "dtype to string");
  EXPECT(tvm::runtime::String2DLDataType("int8").bits == 8, "dtype from string");
  using tvm::runtime::detail::TvmLogDebugSettings;
  EXPECT(!TvmLogDebugSettings::ParseSpec(nullptr).dlog_enabled(), "TVM_LOG_DEBUG unset");
  EXPECT(TvmLogDebugSettings::ParseSpec("1").dlog_enabled(), "TVM_LOG_DEBUG=1 enables DLOG");
  auto v = TvmLogDebugSettings::ParseSpec("relay/foo.cc=2,DEFAULT=0");
  EXPECT(v.dlog_enabled(), "a VLOG spec enables DLOG too");
  EXPECT(v.VerboseEnabled("/x/tvm/src/relay/foo.cc", 2) && !v.VerboseEnabled("/x/tvm/src/relay/foo.cc", 3),
         "VLOG level of a named file");
  EXPECT(v.VerboseEnabled("/x/tvm/src/ir/bar.cc", 0) && !v.VerboseEnabled("/x/tvm/src/ir/bar.cc", 1),
         "DEFAULT level for the others");
  caught = false;
  try {
    TvmLogDebugSettings::ParseSpec("relay/foo.cc=two");
  } catch (const tvm::Error&) {
    caught = true;
  }
  EXPECT(caught, "an ill-formed TVM_LOG_DEBUG throws");
}

// Models built for OpenCL, the way TVM's docs deploy them, on the first OpenCL device: arrays
// made, filled and read on the device, both creation paths, weights shared on the device. Skipped
// where the runtime has no OpenCL device (test_opencl, in C, insists on one in CI), and under
// valgrind (TVM_RT_CXX_NO_OPENCL=1): the OpenCL driver's compiler is not valgrind-clean, and
// test_opencl_arrays_valgrind covers the device memory this library owns.
static void OpenCL(const std::string& root) {
  const char* skip = std::getenv("TVM_RT_CXX_NO_OPENCL");
  if (skip && std::string(skip) == "1") return;
  const PackedFunc* attr = Registry::Get("runtime.GetDeviceAttr");
  int exist = attr ? static_cast<int>((*attr)(static_cast<int>(kDLOpenCL), 0, 0)) : 0;
  if (!exist) {
    std::printf("no OpenCL device: the OpenCL part is skipped\n");
    return;
  }
  DLDevice cl{kDLOpenCL, 0}, cpu{kDLCPU, 0};
  DLDataType f32{kDLFloat, 32, 1};
  std::vector<float> host{1.5f, -2.f, 3.25f, 0.f, 7.f, -0.5f};
  NDArray a = NDArray::Empty({2, 3}, f32, cl);
  EXPECT(a->device.device_type == kDLOpenCL, "an array on the device");
  a.CopyFromBytes(host.data(), host.size() * sizeof(float));
  NDArray b = NDArray::Empty({2, 3}, f32, cl);
  b.CopyFrom(a);
  NDArray c = b.CopyTo(cpu);
  EXPECT(std::memcmp(c->data, host.data(), host.size() * sizeof(float)) == 0, "host -> device -> device -> host");
  std::vector<float> back(6);
  a.CopyToBytes(back.data(), back.size() * sizeof(float));
  EXPECT(back == host, "device -> bytes");

  Fixture fx(root + "/mlp_cl");
  Module lib = Module::LoadFromFile(root + "/mlp_cl/lib.so");
  Module gmod = lib.GetFunction("default")(cl);
  PackedFunc set_input = gmod.GetFunction("set_input");
  for (const auto& t : fx.inputs) {
    // Inputs from device arrays.
    NDArray x = NDArray::Empty(tvm::runtime::ShapeTuple(t.shape), ParseDType(t.dtype), cl);
    std::string bytes = ReadFile(t.file);
    x.CopyFromBytes(bytes.data(), bytes.size());
    set_input(t.name, x);
  }
  gmod.GetFunction("run")();
  CheckOutputs(gmod, fx, "mlp_cl on OpenCL through the factory");
  NDArray y = gmod.GetFunction("get_output")(0);
  EXPECT(y->device.device_type == kDLOpenCL, "outputs live on the device");

  CreatePath(root + "/mlp_unbound_cl_b1", kDLOpenCL);
  EXPECT(TVMSynchronize(kDLOpenCL, 0, nullptr) == 0, "the device's queue drains");
}

// The Relay VM from C++: the split form of a TVM 0.16 executable with runtime.Load_Executable, a
// VM made, init, set_input of NDArrays, invoke; the tuple it returns read with the headers' inline
// ADT code. Upstream's libraries accept only their own version string ("0.16.0" built from
// source, "0.16.dev0" the hhb-tvm wheel's): the code is given each in turn until one loads.
static void RelayVM(const std::string& dir) {
  std::string code = ReadFile(dir + "/code.ro");
  if (code.empty()) return;
  uint64_t n = 0;
  std::memcpy(&n, code.data() + 8, 8);
  Module lib = Module::LoadFromFile(dir + "/lib.so");
  Module exe;
  for (std::string version : {"0.16.0", "0.16.dev0"}) {
    uint64_t len = version.size();
    std::string patched = code.substr(0, 8) + std::string(reinterpret_cast<const char*>(&len), 8) + version +
                          code.substr(16 + n);
    TVMByteArray bytes{patched.data(), patched.size()};
    try {
      exe = (*Registry::Get("runtime.Load_Executable"))(bytes, lib);
      break;
    } catch (const tvm::Error&) {
    }
  }
  EXPECT(exe.defined(), "the executable loads under one of upstream's version strings");
  if (!exe.defined()) return;
  Module vm = exe.GetFunction("vm_load_executable")();
  vm.GetFunction("init")(static_cast<int>(kDLCPU), 0, 2);
  for (int64_t rows : {1, 3, 7}) {
    NDArray x = NDArray::Empty({rows, 16}, DLDataType{kDLFloat, 32, 1}, DLDevice{kDLCPU, 0});
    std::vector<float> ones(rows * 16, 1.0f);
    x.CopyFromBytes(ones.data(), ones.size() * sizeof(float));
    vm.GetFunction("set_input")("main", x);
    tvm::runtime::ObjectRef result = vm.GetFunction("invoke")("main");
    EXPECT(result->IsInstance<tvm::runtime::ADTObj>(), "the VM returns a tuple");
    tvm::runtime::ADT adt = tvm::runtime::Downcast<tvm::runtime::ADT>(result);
    EXPECT(adt.size() == 2 && adt.tag() == 0, "a tuple of two fields");
    NDArray y = tvm::runtime::Downcast<NDArray>(adt[0]);
    NDArray sums = tvm::runtime::Downcast<NDArray>(adt[1]);
    EXPECT(y.Shape()[0] == rows && y.Shape()[1] == 8 && sums.Shape()[0] == rows, "shapes follow the batch");
    std::vector<float> h(rows * 8), s(rows);
    y.CopyToBytes(h.data(), h.size() * sizeof(float));
    sums.CopyToBytes(s.data(), s.size() * sizeof(float));
    for (int64_t r = 0; r < rows; ++r) {
      float total = 0;
      for (int c = 0; c < 8; ++c) total += h[r * 8 + c];
      EXPECT(std::abs(total - s[r]) < 1e-4f * (1 + std::abs(total)), "the sums are the rows' sums");
    }
    int64_t outputs = vm.GetFunction("get_num_outputs")();
    EXPECT(outputs == 2, "two outputs");
    NDArray first = vm.GetFunction("get_output")(0);
    EXPECT(first.Shape()[0] == rows, "get_output");
  }
  // A tuple made by the host and given back: runtime.GetADTSize reads it.
  tvm::runtime::ADT mine = tvm::runtime::ADT::Tuple(std::vector<tvm::runtime::ObjectRef>{
      NDArray::Empty({2}, DLDataType{kDLFloat, 32, 1}, DLDevice{kDLCPU, 0})});
  int64_t size = (*Registry::Get("runtime.GetADTSize"))(mine);
  EXPECT(size == 1, "a host's tuple crosses as a tuple");
}

int main(int argc, char** argv) {
  // "present": only the fixtures the folder has (the aarch64 suite builds the MLPs alone).
  if (argc != 2 && !(argc == 3 && std::string(argv[2]) == "present")) return 2;
  std::string fixtures = argv[1];
  bool present_only = argc == 3;
  auto has = [&](const std::string& m) { return !present_only || !ReadFile(fixtures + "/" + m + "/manifest.txt").empty(); };
  for (const char* m : {"mlp_b1", "convnet", "multi_io", "lstm_seq8"})
    if (has(m)) FactoryPath(fixtures + "/" + m);
  // Not the LSTM fixtures: upstream v0.16 built from source gives other bytes than the reference
  // outputs (recorded with the hhb-tvm wheel's runtime) for them, so they are not a common ground.
  for (const char* m : {"mlp_unbound_b1", "mlp_unbound_b8"})
    if (has(m)) CreatePath(fixtures + "/" + m);
  Errors(fixtures + "/mlp_b1");
  Callbacks();
  Modules(fixtures + "/mlp_b1");
  Containers(fixtures + "/mlp_unbound_b1");
  Arrays();
  ObjectProtocol();
  Logging();
  if (has("opencl/mlp_cl")) OpenCL(fixtures + "/opencl");
  if (has("vm/0.16/mlp_dyn")) RelayVM(fixtures + "/vm/0.16/mlp_dyn");
  return ExitStatus("C++ host ok");
}
