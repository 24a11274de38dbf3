// A host of a vendor plug-in, written against TVM 0.16's own C++ headers: it loads the plug-in
// (c_tests/cxx/plugin/test_plugin.cc) with dlopen as deployments do, then an export_library
// artefact whose module blob holds the plug-in's module (tests/fixtures/byoc/plugin, made by
// scripts/make_plugin_fixtures.py) and runs it; reaches the plug-in's module through the module
// globals (GetSource, GetFormat, SaveToFile, a file format of its own); imports a runtime module
// into the plug-in's and has the plug-in's own C++ find it. CTest runs it on this library and on
// upstream's. With BLOB_LIBS, libraries whose blobs make the plug-in's loaders misbehave: each
// load must fail with a clear error (this library's messages; on upstream's some of them crash,
// which is why that part runs here only).
// usage: test_plugin_host FIXTURE_DIR PLUGIN_SO [BLOB_LIB_PREFIX]
#include "expect.h"
#include "fixture.hpp"

#include <dlfcn.h>
#include <tvm/runtime/c_runtime_api.h>
#include <tvm/runtime/module.h>
#include <tvm/runtime/packed_func.h>
#include <tvm/runtime/registry.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

using tvm::runtime::Module;
using tvm::runtime::PackedFunc;
using tvm::runtime::Registry;

// The message of the error loading `path` throws ("" when it loads).
static std::string LoadError(const std::string& path) {
  try {
    Module m = Module::LoadFromFile(path);
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

static bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// The first module of type `key` in the tree under `m`, depth first (null when none).
static Module Find(Module m, const std::string& key) {
  if (m->type_key() == key) return m;
  for (const Module& child : m->imports()) {
    Module found = Find(child, key);
    if (found.defined()) return found;
  }
  return Module();
}

// The artefact runs: outputs as the compiler's runtime gave them, and as the model says.
static void RunArtefact(const std::string& dir) {
  Fixture fx(dir);
  DLDevice cpu{kDLCPU, 0};
  Module lib = Module::LoadFromFile(dir + "/lib.so");
  Module gmod = lib.GetFunction("default")(cpu);
  SetInputs(gmod, fx);
  gmod.GetFunction("run")();
  CheckOutputs(gmod, fx, "the plug-in's artefact");
  // relu(x * y + 1), computed here.
  std::vector<float> z(8);
  tvm::runtime::NDArray out = gmod.GetFunction("get_output")(0);
  out.CopyToBytes(z.data(), z.size() * sizeof(float));
  std::string xs = ReadFile(fx.inputs[0].file), ys = ReadFile(fx.inputs[1].file);
  const float* x = reinterpret_cast<const float*>(xs.data());
  const float* y = reinterpret_cast<const float*>(ys.data());
  for (int i = 0; i < 8; ++i) EXPECT(z[i] == std::fmax(x[i] * y[i] + 1.0f, 0.0f), "relu(x * y + 1)");

  // The plug-in's module in the tree: its own object, answering its own functions and virtuals,
  // also through the module globals TVM's Python calls.
  Module plugin = Find(lib, "tvmrt_test_plugin");
  EXPECT(plugin.defined(), "the artefact's tree holds the plug-in's module");
  if (!plugin.defined()) return;
  std::string described = plugin.GetFunction("plugin_describe")();
  EXPECT(described == "tvmgen_default_tvmrt_test_plugin_main_0:multiply", described.c_str());
  std::string source = tvm::runtime::String((*Registry::Get("runtime.ModuleGetSource"))(plugin, "c"));
  EXPECT(source == plugin->GetSource("c"), "runtime.ModuleGetSource is the module's GetSource");
  EXPECT(Has(source, "multiply(a, b)"), source.c_str());
  std::string format = tvm::runtime::String((*Registry::Get("runtime.ModuleGetFormat"))(plugin));
  EXPECT(format == "tvmplug", format.c_str());
}

// A plug-in's file format, through the module globals: saved by its SaveToFile, loaded by its
// `runtime.module.loadfile_tvmplug`, from the format the extension names and from an explicit one.
static void FileFormat(const std::string& scratch) {
  Module made = (*Registry::Get("tvmrt_test_plugin.create"))("sym_add", "add");
  std::string path = scratch + "/saved.tvmplug";
  (*Registry::Get("runtime.ModuleSaveToFile"))(made, path, "tvmplug");
  for (const char* fmt : {"", "tvmplug"}) {
    Module back = Module::LoadFromFile(path, fmt);
    EXPECT(std::string(back->type_key()) == "tvmrt_test_plugin", back->type_key());
    std::string described = back.GetFunction("plugin_describe")();
    EXPECT(described == "sym_add:add", described.c_str());
  }
  std::string err = LoadError(scratch + "/missing.nosuchformat");
  EXPECT(Has(err, "nosuchformat"), err.c_str());
}

// A runtime module imported into the plug-in's: its own imports_ hold it, so its C++ finds the
// runtime's functions (GetFunction(name, true) on them, GetFuncFromEnv), and the runtime's side
// sees the import too.
static void Imports(const std::string& fixtures) {
  Module made = (*Registry::Get("tvmrt_test_plugin.create"))("sym_sub", "subtract");
  Module lib = Module::LoadFromFile(fixtures + "/mlp_b1/lib.so");
  EXPECT(TVMModImport(const_cast<tvm::runtime::Object*>(made.get()), const_cast<tvm::runtime::Object*>(lib.get())) == 0, TVMGetLastError());
  int64_t n = made.GetFunction("plugin_num_imports")();
  EXPECT(n == 1, "the plug-in's imports_ holds the runtime's module");
  std::string key = made.GetFunction("plugin_import_type_key")(0);
  EXPECT(key == lib->type_key(), key.c_str());
  PackedFunc found = made.GetFunction("plugin_find_in_imports")("default");
  EXPECT(found != nullptr, "the plug-in finds the factory's 'default' in its imports");
  PackedFunc env = made.GetFunction("plugin_from_env")("default");
  EXPECT(env != nullptr, "GetFuncFromEnv finds it too");
  if (found != nullptr) {
    Module gmod = found(DLDevice{kDLCPU, 0});
    int num_outputs = gmod.GetFunction("get_num_outputs")();
    EXPECT(num_outputs == 1, "the factory found through the plug-in makes an executor");
  }
  TVMFunctionHandle f = nullptr;
  EXPECT(TVMModGetFunction(const_cast<tvm::runtime::Object*>(made.get()), "default", 1, &f) == 0 && f != nullptr, "the C API finds it through the import");
  if (f) TVMFuncFree(f);
  Module import0 = (*Registry::Get("runtime.ModuleGetImport"))(made, 0);
  EXPECT(import0.get() == lib.get(), "runtime.ModuleGetImport gives the imported module");
}

// Containers of this runtime handed to the plug-in's code, which reads them inline with upstream's
// layouts: a Map of 7 entries (a dense map upstream) and an Array, made by the runtime's globals.
static void Containers() {
  Module made = (*Registry::Get("tvmrt_test_plugin.create"))("sym_map", "add");
  std::vector<TVMValue> kv(14);
  std::vector<int> codes(14, kTVMStr);
  std::vector<std::string> text;
  for (int i = 0; i < 7; ++i) {
    text.push_back("key" + std::to_string(i));
    text.push_back(std::string(static_cast<size_t>(i + 1), 'v'));
  }
  // Each string a String object of the runtime's (runtime.String), as both runtimes' Map takes.
  TVMFunctionHandle make_string = nullptr, make_map = nullptr, make_array = nullptr;
  EXPECT(TVMFuncGetGlobal("runtime.String", &make_string) == 0 && TVMFuncGetGlobal("runtime.Map", &make_map) == 0 &&
             TVMFuncGetGlobal("runtime.Array", &make_array) == 0,
         "runtime.String, runtime.Map and runtime.Array");
  for (int i = 0; i < 14; ++i) {
    TVMValue v;
    int c = kTVMStr, rc = 0;
    v.v_str = text[i].c_str();
    EXPECT(TVMFuncCall(make_string, &v, &c, 1, &kv[i], &rc) == 0 && rc == kTVMObjectHandle, TVMGetLastError());
    codes[i] = kTVMObjectHandle;
  }
  TVMValue map, array;
  int map_code = 0, array_code = 0;
  EXPECT(TVMFuncCall(make_map, kv.data(), codes.data(), 14, &map, &map_code) == 0, TVMGetLastError());
  EXPECT(TVMFuncCall(make_array, kv.data(), codes.data(), 3, &array, &array_code) == 0, TVMGetLastError());
  TVMFunctionHandle map_text = nullptr, join = nullptr;
  EXPECT(TVMModGetFunction(const_cast<tvm::runtime::Object*>(made.get()), "plugin_map_text", 0, &map_text) == 0,
         TVMGetLastError());
  EXPECT(TVMModGetFunction(const_cast<tvm::runtime::Object*>(made.get()), "plugin_join", 0, &join) == 0,
         TVMGetLastError());
  TVMValue args[2], r;
  int arg_codes[2] = {kTVMObjectHandle, kTVMStr}, rc = 0;
  args[0] = map;
  args[1].v_str = "key5";
  EXPECT(TVMFuncCall(map_text, args, arg_codes, 2, &r, &rc) == 0 && rc == kTVMStr, TVMGetLastError());
  // 7 entries; keys 7 * 4 bytes, values 1 + ... + 7 = 28 bytes; key5's value is 6 v's.
  if (rc == kTVMStr) EXPECT(std::string(r.v_str) == "7:56:vvvvvv", r.v_str);
  args[0] = array;
  EXPECT(TVMFuncCall(join, args, arg_codes, 1, &r, &rc) == 0 && rc == kTVMStr, TVMGetLastError());
  if (rc == kTVMStr) EXPECT(std::string(r.v_str) == "key0;v;key1;", r.v_str);
  TVMObjectFree(map.v_handle);
  TVMObjectFree(array.v_handle);
  for (TVMValue& v : kv) TVMObjectFree(v.v_handle);
  TVMFuncFree(make_string);
  TVMFuncFree(map_text);
  TVMFuncFree(join);
  TVMFuncFree(make_map);
  TVMFuncFree(make_array);
}

// Blobs whose loaders misbehave: each a clear error, the process intact.
static void BadBlobs(const std::string& prefix) {
  const std::vector<std::pair<int, std::string>> cases = {
      {1, "this loader always fails"}, {2, "returned no module"},          {3, "not a module"},
      {4, "the blob ended after"},     {5, "cannot read the symbol"},      {6, "tvmrt_nobody"},
  };
  for (const auto& c : cases) {
    std::string err = LoadError(prefix + std::to_string(c.first) + ".so");
    EXPECT(Has(err, c.second), (std::to_string(c.first) + ": " + err).c_str());
  }
  // An unknown type's message names what is registered, the plug-in's loader among them.
  EXPECT(Has(LoadError(prefix + "6.so"), "tvmrt_test_plugin"), "the unknown type's error names the registered loaders");
}

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) return 2;
  std::string dir = argv[1];
  std::string fixtures = dir + "/../..";
  // Before the plug-in: its artefact is refused, naming the type.
  std::string before = LoadError(dir + "/lib.so");
  EXPECT(Has(before, "tvmrt_test_plugin"), before.c_str());
  void* handle = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
  EXPECT(handle != nullptr, dlerror());
  if (!handle) return ExitStatus("");
  RunArtefact(dir);
  FileFormat(getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  Imports(fixtures);
  Containers();
  bool ours = Registry::Get("tvmrt.executor.ArenaPool") != nullptr;
  if (argc == 4 && ours) BadBlobs(argv[3]);
  return ExitStatus("plug-in host ok");
}
