// Behaviours a C++ host written against TVM 0.16's headers can observe, each one a case where this
// library once differed from upstream's. CTest runs the binary on this library, under valgrind, and
// on upstream's own build (LD_LIBRARY_PATH), so any difference fails one of them.
// usage: test_cxx_upstream_cases FIXTURES_DIR
#include "expect.h"

#include <dlpack/dlpack.h>
#include <tvm/runtime/container/array.h>
#include <tvm/runtime/container/map.h>
#include <tvm/runtime/device_api.h>
#include <tvm/runtime/logging.h>
#include <tvm/runtime/module.h>
#include <tvm/runtime/ndarray.h>
#include <tvm/runtime/packed_func.h>
#include <tvm/runtime/registry.h>
#include <tvm/runtime/threading_backend.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using tvm::runtime::Module;
using tvm::runtime::NDArray;
using tvm::runtime::Object;
using tvm::runtime::ObjectRef;
using tvm::runtime::PackedFunc;
using tvm::runtime::Registry;
using tvm::runtime::String;


// ---- 1. Type indices of host hierarchies: a non-final base reserves its children's range. ----

class BaseNode : public Object {
 public:
  int base_value = 1;
  static constexpr const char* _type_key = "test.cases.Base";
  static constexpr uint32_t _type_child_slots = 4;
  TVM_DECLARE_BASE_OBJECT_INFO(BaseNode, Object);
};

class OtherNode : public Object {
 public:
  static constexpr const char* _type_key = "test.cases.Other";
  TVM_DECLARE_FINAL_OBJECT_INFO(OtherNode, Object);
};

class ChildNode : public BaseNode {
 public:
  int child_value = 2;
  static constexpr const char* _type_key = "test.cases.Child";
  TVM_DECLARE_FINAL_OBJECT_INFO(ChildNode, BaseNode);
};

class Closed : public Object {
 public:
  static constexpr const char* _type_key = "test.cases.Closed";
  static constexpr uint32_t _type_child_slots = 1;
  static constexpr bool _type_child_slots_can_overflow = false;
  TVM_DECLARE_BASE_OBJECT_INFO(Closed, Object);
};

class ClosedA : public Closed {
 public:
  static constexpr const char* _type_key = "test.cases.ClosedA";
  TVM_DECLARE_FINAL_OBJECT_INFO(ClosedA, Closed);
};

class ClosedB : public Closed {
 public:
  static constexpr const char* _type_key = "test.cases.ClosedB";
  TVM_DECLARE_FINAL_OBJECT_INFO(ClosedB, Closed);
};

static void TypeHierarchy() {
  // Registered in an order that separates the base from its child.
  uint32_t base = BaseNode::RuntimeTypeIndex();
  uint32_t other = OtherNode::RuntimeTypeIndex();
  uint32_t child = ChildNode::RuntimeTypeIndex();
  EXPECT(child > base && child <= base + 4, "a child lies inside its base's reserved range");
  EXPECT(other > base + 4, "an unrelated type lies past the base's reserved range");
  ObjectRef o(tvm::runtime::make_object<OtherNode>());
  ObjectRef c(tvm::runtime::make_object<ChildNode>());
  EXPECT(o.as<BaseNode>() == nullptr, "an OtherNode is not a BaseNode");
  EXPECT(c.as<BaseNode>() != nullptr && c.as<BaseNode>()->base_value == 1, "a ChildNode is a BaseNode");
  EXPECT(!o->IsInstance<BaseNode>() && c->IsInstance<ChildNode>(), "IsInstance");
  EXPECT(Object::TypeIndex2Key(child) == "test.cases.Child", "the key of a host type");
  EXPECT(Object::TypeKey2Index("test.cases.Other") == other, "the index of a host type");
  // The same answers through the C API.
  int derived = -1;
  EXPECT(TVMObjectDerivedFrom(child, base, &derived) == 0 && derived == 1, "C API: child derives from base");
  EXPECT(TVMObjectDerivedFrom(other, base, &derived) == 0 && derived == 0, "C API: other does not");
  uint32_t index = 0;
  EXPECT(TVMObjectTypeKey2Index("test.cases.Child", &index) == 0 && index == child, "C API: key to index");
  // Indices past the table and unknown keys are errors, as upstream's.
  EXPECT(TVMObjectDerivedFrom(100000, 0, &derived) == -1, "a child index past the table");
  EXPECT(TVMObjectTypeKey2Index("runtime.Object", &index) == -1, "the root is not found by key");
  // A full range that may not overflow refuses another child.
  (void)ClosedA::RuntimeTypeIndex();
  bool refused = false;
  try {
    (void)ClosedB::RuntimeTypeIndex();
  } catch (const tvm::Error& e) {
    refused = std::strstr(e.what(), "maximum number of sub") != nullptr || std::strstr(e.what(), "Closed") != nullptr;
  }
  EXPECT(refused, "a second child of a one-slot base that cannot overflow is refused");
}

// ---- 2. A host's own module comes back as itself. ----

class SeedNode : public tvm::runtime::ModuleNode {
 public:
  uint32_t seed = 0x5eed5eed;
  const char* type_key() const final { return "test.cases.seed"; }
  PackedFunc GetFunction(const String& name, const tvm::runtime::ObjectPtr<Object>&) final {
    if (name == "seed") {
      uint32_t s = seed;
      return PackedFunc([s](tvm::runtime::TVMArgs, tvm::runtime::TVMRetValue* rv) { *rv = static_cast<int64_t>(s); });
    }
    return PackedFunc();
  }
};

static void HostModuleIdentity(const std::string& dir) {
  auto node = tvm::runtime::make_object<SeedNode>();
  SeedNode* raw = node.get();
  Module host(node);
  // Through a registered function of the host's, called by the library with the module.
  Registry::Register("test.cases.echo_module", true).set_body_typed([](Module m) { return m; });
  const PackedFunc* echo = Registry::Get("test.cases.echo_module");
  Module back = (*echo)(host);
  EXPECT(back.get() == host.get(), "a host module returned through the library is the host's object");
  auto* seed = back.as<SeedNode>();
  EXPECT(std::string(back->type_key()) == "test.cases.seed", "its type key");
  EXPECT(seed == raw && seed->seed == 0x5eed5eed, "the host's cast to its own class reads its own field");
  // Through runtime.ModuleGetImport after Module::Import, and the inline imports().
  Module lib = Module::LoadFromFile(dir + "/lib.so");
  lib.Import(host);
  bool found = false;
  for (const Module& m : lib->imports()) found |= m.get() == host.get();
  EXPECT(found, "imports() lists the host's own object");
  const PackedFunc* get_import = Registry::Get("runtime.ModuleGetImport");
  if (get_import) {
    int n = static_cast<int>(lib->imports().size());
    Module last = (*get_import)(lib, n - 1);
    EXPECT(last.get() == host.get() && last.as<SeedNode>() == raw, "ModuleGetImport gives the host's object");
  }
  Registry::Remove("test.cases.echo_module");
}

// ---- 3. Temporaries travel as rvalue references (type code 14). ----

static void Temporaries(const std::string& dir) {
  DLDevice cpu{kDLCPU, 0};
  Module lib = Module::LoadFromFile(dir + "/lib.so");
  Module gmod = lib.GetFunction("default")(cpu);
  NDArray x = NDArray::Empty({1, 1, 28, 28}, DLDataType{kDLFloat, 32, 1}, cpu);
  std::vector<float> ones(784, 1.0f);
  x.CopyFromBytes(ones.data(), ones.size() * sizeof(float));
  bool ok = true;
  try {
    gmod.GetFunction("set_input")(String("data"), x);
    gmod.GetFunction("run")();
  } catch (const std::exception& e) {
    ok = false;
    std::fprintf(stderr, "%s\n", e.what());
  }
  EXPECT(ok, "set_input with a String temporary");
  // Functions that take a typed argument convert a temporary like any other object.
  const PackedFunc* get_function = Registry::Get("runtime.ModuleGetFunction");
  PackedFunc run = (*get_function)(gmod, String("run"), false);
  EXPECT(run != nullptr, "ModuleGetFunction with a String temporary");
  int64_t index = gmod.GetFunction("get_input_index")(String("data"));
  EXPECT(index == 0, "get_input_index with a String temporary");
}

// ---- 4. set_output_zero_copy on a __nop of a weight leaves the weight alone. ----

// w -> __nop -> out0, w -> __copy -> out1; x -> __nop -> out2, x -> __copy -> out3.
static const char* kAliasGraph = R"({"nodes":[{"op":"null","name":"w","inputs":[]},{"op":"null","name":"x","inputs":[]},
 {"op":"tvm_op","name":"n0","attrs":{"func_name":"__nop","num_inputs":"1","num_outputs":"1","flatten_data":"0"},"inputs":[[0,0,0]]},
 {"op":"tvm_op","name":"n1","attrs":{"func_name":"__copy","num_inputs":"1","num_outputs":"1","flatten_data":"0"},"inputs":[[0,0,0]]},
 {"op":"tvm_op","name":"n2","attrs":{"func_name":"__nop","num_inputs":"1","num_outputs":"1","flatten_data":"0"},"inputs":[[1,0,0]]},
 {"op":"tvm_op","name":"n3","attrs":{"func_name":"__copy","num_inputs":"1","num_outputs":"1","flatten_data":"0"},"inputs":[[1,0,0]]}],
 "arg_nodes":[0,1],"heads":[[2,0,0],[3,0,0],[4,0,0],[5,0,0]],"node_row_ptr":[0,1,2,3,4,5,6],
 "attrs":{"dltype":["list_str",["float32","float32","float32","float32","float32","float32"]],
  "shape":["list_shape",[[16],[16],[16],[16],[16],[16]]],"storage_id":["list_int",[0,1,0,2,1,3]]}})";

static NDArray Filled(float v) {
  NDArray a = NDArray::Empty({16}, DLDataType{kDLFloat, 32, 1}, DLDevice{kDLCPU, 0});
  std::vector<float> vals(16, v);
  a.CopyFromBytes(vals.data(), sizeof(float) * 16);
  return a;
}

static float First(NDArray a) {
  float v[16];
  a.CopyToBytes(v, sizeof v);
  return v[0];
}

static void ZeroCopyAliases(const std::string& dir) {
  Module lib = Module::LoadFromFile(dir + "/lib.so");
  const PackedFunc* create = Registry::Get("tvm.graph_executor.create");
  Module g = (*create)(std::string(kAliasGraph), lib, static_cast<int>(kDLCPU), 0);
  NDArray out0_buf = Filled(-7);
  g.GetFunction("set_output_zero_copy")(0, out0_buf);
  // load_params with w = 1..16.
  const PackedFunc* save = Registry::Get("runtime.SaveParams");
  NDArray w = NDArray::Empty({16}, DLDataType{kDLFloat, 32, 1}, DLDevice{kDLCPU, 0});
  std::vector<float> ws(16);
  for (int i = 0; i < 16; ++i) ws[i] = static_cast<float>(i + 1);
  w.CopyFromBytes(ws.data(), sizeof(float) * 16);
  tvm::runtime::Map<String, NDArray> params({{String("w"), w}});
  std::string blob = (*save)(params);
  g.GetFunction("load_params")(TVMByteArray{blob.data(), blob.size()});
  g.GetFunction("run")();
  PackedFunc get_output = g.GetFunction("get_output");
  EXPECT(First(get_output(1)) == 1.0f, "the copy of w reads w, not the buffer out0 was bound to");
  EXPECT(First(get_output(0)) == -7.0f, "out0 shows the caller's buffer, which no operator writes");
  // The latest binding wins: an output aliasing x bound first, then x itself.
  NDArray out2_buf = Filled(-5), xa = Filled(3);
  g.GetFunction("set_output_zero_copy")(2, out2_buf);
  g.GetFunction("set_input_zero_copy")("x", xa);
  g.GetFunction("run")();
  EXPECT(First(get_output(3)) == 3.0f, "operators read x's zero-copy memory");
  EXPECT(First(get_output(2)) == 3.0f, "the alias of x follows x's latest binding");
  g.GetFunction("set_input")("x", Filled(4));
  EXPECT(First(xa) == 4.0f, "set_input writes into x's zero-copy memory");
  // Outputs are named "<node>:<output index>" (output 3 is node n3's only output); other names,
  // the node's own name and its entry index among them, are skipped.
  NDArray out3_buf = Filled(-1), skipped = Filled(-2);
  for (const char* name : {"n3", "n3:0", "no_such_node"}) g.GetFunction("set_output_zero_copy")(name, skipped);
  g.GetFunction("run")();
  EXPECT(First(get_output(3)) == 4.0f && First(skipped) == -2.0f, "unknown output names bind nothing");
  g.GetFunction("set_output_zero_copy")("n3:3", out3_buf);
  g.GetFunction("run")();
  EXPECT(First(out3_buf) == 4.0f, "the copy of x is written into the buffer bound as \"n3:3\"");
}

// ---- 4b. get_input / get_output hand out the entry: one array that follows its bindings. ----

static void EntryArrays(const std::string& dir) {
  Module lib = Module::LoadFromFile(dir + "/lib.so");
  const PackedFunc* create = Registry::Get("tvm.graph_executor.create");
  Module g = (*create)(std::string(kAliasGraph), lib, static_cast<int>(kDLCPU), 0);
  PackedFunc get_output = g.GetFunction("get_output"), get_input = g.GetFunction("get_input");
  g.GetFunction("set_input")("x", Filled(2));
  g.GetFunction("run")();
  NDArray out3 = get_output(3), x = get_input("x");
  EXPECT(NDArray(get_output(3)).get() == out3.get(), "get_output hands out the same array each time");
  EXPECT(NDArray(get_input("x")).get() == x.get(), "get_input hands out the same array each time");
  // Bound with zero-copy, the arrays handed out before show the caller's memory.
  NDArray out3_buf = Filled(-1), x_buf = Filled(6);
  g.GetFunction("set_output_zero_copy")(3, out3_buf);
  g.GetFunction("set_input_zero_copy")("x", x_buf);
  EXPECT(out3->data == out3_buf->data && First(out3) == -1.0f, "an output array follows its zero-copy binding");
  EXPECT(x->data == x_buf->data && First(x) == 6.0f, "an input array follows its zero-copy binding");
  g.GetFunction("run")();
  EXPECT(First(out3) == 6.0f, "the run writes where the output array points");
  // load_params into an input bound with zero-copy writes the caller's memory.
  NDArray w_buf = Filled(0);
  g.GetFunction("set_input_zero_copy")("w", w_buf);
  const PackedFunc* save = Registry::Get("runtime.SaveParams");
  tvm::runtime::Map<String, NDArray> params({{String("w"), Filled(9)}});
  std::string blob = (*save)(params);
  g.GetFunction("load_params")(TVMByteArray{blob.data(), blob.size()});
  EXPECT(First(w_buf) == 9.0f, "load_params writes a zero-copy bound weight's memory");
  g.GetFunction("run")();
  EXPECT(First(get_output(1)) == 9.0f, "operators read the loaded weight");
}

// ---- 5. The packed set_input copies by byte size and ignores names that are not inputs. ----

static void SetInputSemantics(const std::string& dir) {
  DLDevice cpu{kDLCPU, 0};
  Module lib = Module::LoadFromFile(dir + "/lib.so");
  Module gmod = lib.GetFunction("default")(cpu);
  NDArray flat = NDArray::Empty({1, 784}, DLDataType{kDLFloat, 32, 1}, cpu);
  std::vector<float> vals(784);
  for (int i = 0; i < 784; ++i) vals[i] = static_cast<float>(i % 7);
  flat.CopyFromBytes(vals.data(), vals.size() * sizeof(float));
  bool ok = true;
  try {
    gmod.GetFunction("set_input")("data", flat);
    gmod.GetFunction("set_input")("not_an_input", flat);
    NDArray as_int = NDArray::Empty({784}, DLDataType{kDLInt, 32, 1}, cpu);
    gmod.GetFunction("set_input")(0, as_int.CreateView({784}, DLDataType{kDLInt, 32, 1}));
    gmod.GetFunction("set_input")("data", flat);
    gmod.GetFunction("run")();
  } catch (const std::exception& e) {
    ok = false;
    std::fprintf(stderr, "%s\n", e.what());
  }
  EXPECT(ok, "another shape or dtype of the same byte size, and an unknown name, are accepted");
  NDArray in = gmod.GetFunction("get_input")("data");
  std::vector<float> got(784);
  in.CopyToBytes(got.data(), got.size() * sizeof(float));
  EXPECT(got == vals, "the bytes arrived");
  bool refused = false;
  try {
    gmod.GetFunction("set_input")("data", NDArray::Empty({1, 783}, DLDataType{kDLFloat, 32, 1}, cpu));
  } catch (const tvm::Error&) {
    refused = true;
  }
  EXPECT(refused, "another byte size is refused");
}

// ---- 6. TVM_LOG_DEBUG parse errors carry upstream's wording. ----

static std::string SpecError(const char* spec) {
  try {
    tvm::runtime::detail::TvmLogDebugSettings::ParseSpec(spec);
  } catch (const tvm::runtime::InternalError& e) {
    return e.message();
  }
  return "";
}

static void LogDebugSpec() {
  std::string e = SpecError("foo/bar.cc=bogus;");
  EXPECT(e.find("TVM_LOG_DEBUG ill-formed at position 11: invalid level: \"bogus;\"") != std::string::npos, e.c_str());
  e = SpecError("foo/bar.cc=1,baz");
  EXPECT(e.find("TVM_LOG_DEBUG ill-formed at position 16: expecting \"=<level>\" after \"baz\"") != std::string::npos,
         e.c_str());
  e = SpecError("=1");
  EXPECT(e.find("TVM_LOG_DEBUG ill-formed at position 1: empty filename") != std::string::npos, e.c_str());
  e = SpecError("a.cc=x,b.cc=1");
  EXPECT(e.find("ill-formed at position 7: invalid level: \"x\"") != std::string::npos, e.c_str());
  auto s = tvm::runtime::detail::TvmLogDebugSettings::ParseSpec("src/a.cc=1,src/a.cc=3");
  EXPECT(s.VerboseEnabled("/x/src/a.cc", 1) && !s.VerboseEnabled("/x/src/a.cc", 2), "the first setting of a file wins");
}

// ---- 7. The threading API of threading_backend.h links and runs on the library's pool. ----

static void Threading() {
  namespace th = tvm::runtime::threading;
  int max = th::MaxConcurrency();
  EXPECT(max >= 1, "MaxConcurrency");
  th::Configure(th::ThreadGroup::kBig, 1, {});
  EXPECT(th::NumThreads() == 1, "Configure with one thread");
  std::atomic<int64_t> sum{0};
  tvm::runtime::parallel_for_with_threading_backend([&](int64_t i) { sum += i; }, 0, 1000);
  EXPECT(sum == 999 * 1000 / 2, "parallel_for on one thread");
  th::Configure(th::ThreadGroup::kSpecifyOneCorePerThread, 0, {0, 0});
  EXPECT(th::NumThreads() == std::min(2, max), "one thread per listed core, at most MaxConcurrency()");
  sum = 0;
  tvm::runtime::parallel_for_with_threading_backend([&](int64_t i) { sum += i; }, 0, 1000);
  EXPECT(sum == 999 * 1000 / 2, "parallel_for on two threads");
  th::SetMaxConcurrency(3);
  EXPECT(th::MaxConcurrency() == 3, "SetMaxConcurrency");
  th::SetMaxConcurrency(0);
  th::Configure(th::ThreadGroup::kBig, 0, {});
  th::ResetThreadPool();
  th::Yield();
  // A thread group of its own: every worker runs once.
  std::atomic<int> ran{0};
  {
    th::ThreadGroup group(3, [&](int) { ran++; }, false);
    group.Join();
  }
  EXPECT(ran == 3, "ThreadGroup runs each worker");
  ran = 0;
  {
    th::ThreadGroup group(2, [&](int id) { ran += id; }, true);
    EXPECT(group.Configure(th::ThreadGroup::kBig, 0, true) >= 1, "ThreadGroup::Configure");
    group.Join();
  }
  EXPECT(ran == 1, "with worker 0 excluded, only worker 1 runs");
}

// ---- 6b. The graph JSON is its first value: a buffer's tail after it is ignored. ----
// Upstream's rtvm reads a package's mod.json into a string longer than the file, whose tail is
// whatever the heap held; upstream's reader stops after the first value.

static void GraphJsonTail(const std::string& dir) {
  FILE* f = std::fopen((dir + "/graph.json").c_str(), "rb");
  EXPECT(f != nullptr, "graph.json");
  if (!f) return;
  std::string json;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) json.append(buf, n);
  std::fclose(f);
  Module lib = Module::LoadFromFile(dir + "/lib.so");
  const PackedFunc* create = Registry::Get("tvm.graph_executor.create");
  Module plain = (*create)(json, lib, static_cast<int>(kDLCPU), 0);
  Module tailed = (*create)(json + "\x01\xfe\xff garbage }{", lib, static_cast<int>(kDLCPU), 0);
  int inputs = tailed.GetFunction("get_num_inputs")();
  EXPECT(inputs == static_cast<int>(plain.GetFunction("get_num_inputs")()), "the same graph, tail or none");
}

// tvm::runtime::DeviceAPI::Get and the virtual methods a host built against these headers reaches
// as written (SetDevice through SetStream: the slots the wheel's header shares with upstream
// v0.16's): memory, copies, attributes, streams; a device type not served.
static void DeviceApi() {
  using tvm::runtime::DeviceAPI;
  DLDataType f32{kDLFloat, 32, 1};
  DLDevice cpu{kDLCPU, 0};
  DeviceAPI* api = DeviceAPI::Get(cpu);
  EXPECT(api != nullptr, "the CPU's device API");
  tvm::runtime::TVMRetValue rv;
  api->GetAttr(cpu, tvm::runtime::kExist, &rv);
  EXPECT(static_cast<int>(rv) == 1, "cpu(0) exists");
  api->SetDevice(cpu);
  int64_t shape[1] = {64};
  void* p = api->AllocDataSpace(cpu, 256, 64, f32);
  void* q = api->AllocDataSpace(cpu, 1, shape, f32, tvm::runtime::Optional<tvm::runtime::String>());
  EXPECT(p && q && reinterpret_cast<uintptr_t>(p) % 64 == 0, "aligned host memory");
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = 0.5f * i - 3;
  std::memcpy(p, x.data(), 256);
  DLTensor a{p, cpu, 1, f32, shape, nullptr, 0}, b{q, cpu, 1, f32, shape, nullptr, 0};
  EXPECT(api->GetDataSize(a) == 256, "data size");
  api->CopyDataFromTo(&a, &b, nullptr);
  api->StreamSync(cpu, nullptr);
  EXPECT(std::memcmp(p, q, 256) == 0, "host to host");
  if (!std::getenv("TVM_RT_CXX_NO_OPENCL")) {
    DLDevice cl{kDLOpenCL, 0};
    DeviceAPI* c = DeviceAPI::Get(cl, true);
    tvm::runtime::TVMRetValue exists;
    if (c) c->GetAttr(cl, tvm::runtime::kExist, &exists);
    if (c && static_cast<int>(exists) == 1) {
      TVMStreamHandle s = c->CreateStream(cl);
      c->SetStream(cl, s);
      void* d = c->AllocDataSpace(cl, 1, shape, f32, tvm::runtime::Optional<tvm::runtime::String>());
      DLTensor dt{d, cl, 1, f32, shape, nullptr, 0};
      std::memset(q, 0, 256);
      c->CopyDataFromTo(&a, &dt, s);
      c->CopyDataFromTo(&dt, &b, s);
      c->StreamSync(cl, s);
      EXPECT(std::memcmp(p, q, 256) == 0, "host to OpenCL to host, on the stream set");
      c->SetStream(cl, nullptr);
      c->FreeStream(cl, s);
      c->FreeDataSpace(cl, d);
    }
  }
  api->FreeDataSpace(cpu, p);
  api->FreeDataSpace(cpu, q);
  EXPECT(DeviceAPI::Get(DLDevice{kDLCUDA, 0}, true) == nullptr, "a device type not served, allowed missing");
  bool threw = false;
  try {
    DeviceAPI::Get(DLDevice{kDLCUDA, 0});
  } catch (const tvm::runtime::Error& e) {
    threw = std::string(e.what()).find("is not enabled") != std::string::npos;
  }
  EXPECT(threw, "a device type not served: an error saying so");
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  std::string fixtures = argv[1];
  TypeHierarchy();
  HostModuleIdentity(fixtures + "/mlp_b1");
  Temporaries(fixtures + "/mlp_b1");
  ZeroCopyAliases(fixtures + "/mlp_b1");
  EntryArrays(fixtures + "/mlp_b1");
  SetInputSemantics(fixtures + "/mlp_b1");
  GraphJsonTail(fixtures + "/mlp_unbound_b1");
  LogDebugSpec();
  Threading();
  DeviceApi();
  return ExitStatus("upstream cases ok");
}
