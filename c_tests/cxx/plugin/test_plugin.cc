// A vendor runtime plug-in, written as vendors write them: against TVM 0.16's C++ headers, linked
// to libtvm_runtime.so, nothing of this runtime's own. It adds a module type
// (`tvmrt_test_plugin`: one elementwise op on float32 tensors under the external symbol a BYOC
// partition gave it), its blob loader, a file format (`.tvmplug`) with its loader, and the
// compiler's side of it (`tvmrt_test_plugin.create`, which scripts/make_plugin_fixtures.py calls
// from a `relay.ext.tvmrt_test_plugin` codegen so export_library puts the module into the
// artefact). The same source is built for TVM's compiler (old std::string ABI, resolved against
// the compiler's libtvm.so) and for the tests (against this runtime, and against upstream's).
//
// Loaders that misbehave, for the runtime's bad-input tests, are registered beside the real one.

#include <dmlc/io.h>
#include <tvm/runtime/container/array.h>
#include <tvm/runtime/container/map.h>
#include <tvm/runtime/module.h>
#include <tvm/runtime/ndarray.h>
#include <tvm/runtime/packed_func.h>
#include <tvm/runtime/registry.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace {

using namespace tvm::runtime;

constexpr const char* kMagic = "tvmrt-test-plugin 1";

class PluginModule final : public ModuleNode {
 public:
  PluginModule(std::string symbol, std::string op) : symbol_(std::move(symbol)), op_(std::move(op)) {
    ICHECK(op_ == "add" || op_ == "multiply" || op_ == "subtract") << "tvmrt_test_plugin: unknown op '" << op_ << "'";
  }

  const char* type_key() const final { return "tvmrt_test_plugin"; }

  PackedFunc GetFunction(const String& name, const ObjectPtr<Object>& self) final {
    if (name == symbol_) {
      return PackedFunc([this, self](TVMArgs args, TVMRetValue*) { Run(args); });
    }
    if (name == "plugin_describe") {
      return PackedFunc([this, self](TVMArgs, TVMRetValue* rv) { *rv = symbol_ + ":" + op_; });
    }
    // What this module's own C++ sees of its imports: their number, and a function found in them
    // the ways upstream's module code finds one.
    if (name == "plugin_num_imports") {
      return PackedFunc([this, self](TVMArgs, TVMRetValue* rv) { *rv = static_cast<int64_t>(imports_.size()); });
    }
    if (name == "plugin_import_type_key") {
      return PackedFunc([this, self](TVMArgs args, TVMRetValue* rv) {
        int i = args[0];
        ICHECK(i >= 0 && i < static_cast<int>(imports_.size())) << "no import " << i;
        *rv = std::string(imports_[i]->type_key());
      });
    }
    if (name == "plugin_find_in_imports") {
      return PackedFunc([this, self](TVMArgs args, TVMRetValue* rv) {
        std::string fname = args[0];
        for (Module& m : imports_) {
          PackedFunc f = m->GetFunction(fname, true);
          if (f != nullptr) {
            *rv = f;
            return;
          }
        }
      });
    }
    if (name == "plugin_from_env") {
      return PackedFunc([this, self](TVMArgs args, TVMRetValue* rv) {
        std::string fname = args[0];
        *rv = *GetFuncFromEnv(fname);
      });
    }
    // Containers as the runtime hands them over, read with the headers' inline code: a Map of
    // strings (its lookups and iteration are all inline) and an Array of strings.
    if (name == "plugin_map_text") {
      return PackedFunc([this, self](TVMArgs args, TVMRetValue* rv) {
        Map<String, String> m = args[0];
        std::string key = args[1];
        int64_t total = 0;
        for (const auto& kv : m) total += static_cast<int64_t>(kv.first.size() + kv.second.size());
        *rv = std::to_string(m.size()) + ":" + std::to_string(total) + ":" + std::string(m.at(key));
      });
    }
    if (name == "plugin_join") {
      return PackedFunc([this, self](TVMArgs args, TVMRetValue* rv) {
        Array<String> items = args[0];
        std::string out;
        for (const String& s : items) out += std::string(s) + ";";
        *rv = out;
      });
    }
    return PackedFunc();
  }

  void SaveToBinary(dmlc::Stream* stream) final {
    stream->Write(symbol_);
    stream->Write(op_);
  }

  void SaveToFile(const String& file_name, const String& format) final {
    std::ofstream out(file_name.operator std::string(), std::ios::binary);
    out << kMagic << "\n" << symbol_ << "\n" << op_ << "\n";
    ICHECK(out.good()) << "tvmrt_test_plugin: cannot write " << file_name;
  }

  String GetSource(const String& format) final {
    return "// tvmrt_test_plugin (" + std::string(format) + "): " + symbol_ + " = " + op_ + "(a, b)\n";
  }

  String GetFormat() final { return "tvmplug"; }

  int GetPropertyMask() const final {
    return ModulePropertyMask::kBinarySerializable | ModulePropertyMask::kRunnable;
  }

 private:
  // out = op(a, b), elementwise, float32, same shapes.
  void Run(TVMArgs args) const {
    ICHECK_EQ(args.size(), 3) << symbol_ << " takes (a, b, out)";
    DLTensor* a = args[0];
    DLTensor* b = args[1];
    DLTensor* out = args[2];
    int64_t n = 1;
    for (int i = 0; i < out->ndim; ++i) n *= out->shape[i];
    const float* x = reinterpret_cast<const float*>(static_cast<char*>(a->data) + a->byte_offset);
    const float* y = reinterpret_cast<const float*>(static_cast<char*>(b->data) + b->byte_offset);
    float* z = reinterpret_cast<float*>(static_cast<char*>(out->data) + out->byte_offset);
    for (int64_t i = 0; i < n; ++i) {
      z[i] = op_ == "add" ? x[i] + y[i] : op_ == "multiply" ? x[i] * y[i] : x[i] - y[i];
    }
  }

  std::string symbol_;
  std::string op_;
};

Module Create(std::string symbol, std::string op) { return Module(make_object<PluginModule>(symbol, op)); }

Module LoadBinary(void* strm) {
  auto* stream = static_cast<dmlc::Stream*>(strm);
  std::string symbol, op;
  ICHECK(stream->Read(&symbol)) << "tvmrt_test_plugin: cannot read the symbol";
  ICHECK(stream->Read(&op)) << "tvmrt_test_plugin: cannot read the op";
  return Create(symbol, op);
}

Module LoadFile(std::string path, std::string format) {
  std::ifstream in(path, std::ios::binary);
  std::string magic, symbol, op;
  std::getline(in, magic);
  std::getline(in, symbol);
  std::getline(in, op);
  ICHECK(in.good() && magic == kMagic) << "tvmrt_test_plugin: '" << path << "' is not a ." << format << " file";
  return Create(symbol, op);
}

}  // namespace

TVM_REGISTER_GLOBAL("runtime.module.loadbinary_tvmrt_test_plugin").set_body_typed(LoadBinary);
TVM_REGISTER_GLOBAL("runtime.module.loadfile_tvmplug").set_body_typed(LoadFile);
TVM_REGISTER_GLOBAL("tvmrt_test_plugin.create").set_body_typed(Create);

// Misbehaving loaders: one that throws, one that returns no module, one that returns something
// else, one that reads everything there is and more (its ICHECK stops it).
TVM_REGISTER_GLOBAL("runtime.module.loadbinary_tvmrt_test_throws").set_body_typed([](void*) -> Module {
  throw tvm::Error("tvmrt_test_throws: this loader always fails");
});
TVM_REGISTER_GLOBAL("runtime.module.loadbinary_tvmrt_test_null").set_body_typed([](void*) { return Module(); });
TVM_REGISTER_GLOBAL("runtime.module.loadbinary_tvmrt_test_int").set_body_typed([](void*) { return 42; });
TVM_REGISTER_GLOBAL("runtime.module.loadbinary_tvmrt_test_greedy").set_body_typed([](void* strm) -> Module {
  auto* stream = static_cast<dmlc::Stream*>(strm);
  char buf[4096];
  size_t total = 0, got = 0;
  while ((got = stream->Read(buf, sizeof buf)) == sizeof buf) total += got;
  total += got;
  ICHECK(got == sizeof buf) << "tvmrt_test_greedy: the blob ended after " << total << " bytes";
  return Module();
});
