// Programs compiled once, the way upstream's rtvm (apps/cpp_rtvm, UsePreCompiledPrograms) keeps
// them: with no blob file yet, the library's opencl.GetPreCompiledPrograms is written to it; with
// one, its bytes go to opencl.SetPreCompiledPrograms before the first run. Run on either library,
// the blob one wrote is read by the other (c_tests/precompiled_programs.sh).
//   precompiled_programs FIXTURE_DIR BLOB_FILE
//       the fixture's model through the factory on OpenCL device 0, outputs checked
//   precompiled_programs --time MODEL_DIR BLOB_FILE|-
//       milliseconds of load + programs set (when the file exists) + create + load_params + the
//       first run + sync, then the blob written (untimed) when the file does not exist yet; "-"
//       uses no blob (bench/opencl_programs.sh)
#include "expect.h"
#include "fixture.hpp"

#include <tvm/runtime/c_runtime_api.h>
#include <tvm/runtime/registry.h>

#include <chrono>
#include <cstdio>

static bool HaveOpenCL() {
  const PackedFunc* attr = tvm::runtime::Registry::Get("runtime.GetDeviceAttr");
  return attr && static_cast<int>((*attr)(static_cast<int>(kDLOpenCL), 0, 0));
}

// rtvm's UsePreCompiledPrograms: sets the blob when the file has one; else writes the library's.
static void UsePreCompiledPrograms(Module lib, const std::string& blob_file, bool* wrote) {
  PackedFunc get = lib->GetFunction("opencl.GetPreCompiledPrograms", true);
  PackedFunc set = lib->GetFunction("opencl.SetPreCompiledPrograms", true);
  EXPECT(get != nullptr && set != nullptr, "the library's OpenCL module answers both");
  if (get == nullptr || set == nullptr) return;
  std::string blob = ReadFile(blob_file);
  *wrote = blob.empty();
  if (blob.empty()) {
    std::string got = get();
    tvm::runtime::String bytes(got);
    std::ofstream(blob_file, std::ios::binary).write(bytes.c_str(), static_cast<std::streamsize>(bytes.size()));
    EXPECT(bytes.size() > 8, "a count and programs");
  } else {
    set(tvm::runtime::String(blob));
  }
}

static int Time(const std::string& dir, const std::string& blob_file) {
  auto start = std::chrono::steady_clock::now();
  Module lib = Module::LoadFromFile(dir + "/lib.so");
  bool have_blob = blob_file != "-" && !ReadFile(blob_file).empty();
  bool wrote = false;
  if (have_blob) UsePreCompiledPrograms(lib, blob_file, &wrote);
  std::string json = ReadFile(dir + "/graph.json"), params = ReadFile(dir + "/params.bin");
  Module gmod = (*tvm::runtime::Registry::Get("tvm.graph_executor.create"))(json, lib, static_cast<int>(kDLOpenCL), 0);
  gmod.GetFunction("load_params")(TVMByteArray{params.data(), params.size()});
  gmod.GetFunction("run")();
  EXPECT(TVMSynchronize(kDLOpenCL, 0, nullptr) == 0, "the device drains");
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("%.1f\n", ms);
  if (!have_blob && blob_file != "-") UsePreCompiledPrograms(lib, blob_file, &wrote);
  return failures ? 1 : 0;
}

int main(int argc, char** argv) {
  if (!HaveOpenCL()) {
    std::printf("no OpenCL device\n");
    return 77;
  }
  if (argc == 4 && std::string(argv[1]) == "--time") return Time(argv[2], argv[3]);
  if (argc != 3) return 2;
  std::string dir = argv[1], blob_file = argv[2];
  Fixture fx(dir);
  Module lib = Module::LoadFromFile(dir + "/lib.so");
  bool wrote = false;
  UsePreCompiledPrograms(lib, blob_file, &wrote);
  std::printf("%s the programs\n", wrote ? "wrote" : "read");
  Module gmod = lib.GetFunction("default")(DLDevice{kDLOpenCL, 0});
  SetInputs(gmod, fx);
  gmod.GetFunction("run")();
  CheckOutputs(gmod, fx, "the model after the programs");
  return ExitStatus("programs ok");
}
