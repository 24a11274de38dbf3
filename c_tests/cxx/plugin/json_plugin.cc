// A BYOC JSON backend, written as DNNL's, TensorRT's, CLML's and vendors' are: a subclass of
// upstream's JSONRuntimeBase (src/runtime/contrib/json/json_runtime.h of TVM's source, compiled in
// unchanged: TVM_JSON_RUNTIME_INCLUDE names its folder) with its Init and Run, and the blob loader
// the base class provides. It runs a partition's graph of elementwise float32 operators (add,
// subtract, multiply), its inputs, constants and outputs as the base class binds them. The
// compiler's side (a `relay.ext.tvmrt_json` codegen writing the JSON graph) is
// scripts/make_plugin_fixtures.py.

#include <tvm/runtime/ndarray.h>
#include <tvm/runtime/registry.h>

#include <string>
#include <vector>

#include "json_runtime.h"

namespace {

using namespace tvm::runtime;
using namespace tvm::runtime::json;

class ElementwiseRuntime final : public JSONRuntimeBase {
 public:
  ElementwiseRuntime(const std::string& symbol, const std::string& graph, const Array<String> consts)
      : JSONRuntimeBase(symbol, graph, consts) {}

  const char* type_key() const final { return "tvmrt_json"; }

  // The constants as const_loader hands them over (an Array<NDArray> in upstream's layout); the
  // intermediate outputs get arrays of their own.
  void Init(const Array<NDArray>& consts) final {
    SetupConstants(consts);
    for (size_t nid = 0; nid < nodes_.size(); ++nid) {
      const JSONGraphNode& node = nodes_[nid];
      if (node.GetOpType() != "kernel") continue;
      uint32_t eid = EntryID(nid, 0);
      std::vector<int64_t> shape = node.GetOpShape()[0];
      owned_.push_back(NDArray::Empty(ShapeTuple(shape), node.GetOpDataType()[0], DLDevice{kDLCPU, 0}));
      intermediate_[eid] = owned_.back().operator->();
    }
  }

  void Run() final {
    for (size_t nid = 0; nid < nodes_.size(); ++nid) {
      const JSONGraphNode& node = nodes_[nid];
      if (node.GetOpType() != "kernel") continue;
      const std::string& op = node.GetOpName();
      ICHECK(op == "add" || op == "subtract" || op == "multiply") << "tvmrt_json: no kernel for " << op;
      std::vector<JSONGraphNodeEntry> in = node.GetInputs();
      ICHECK_EQ(in.size(), 2U) << op << " takes two inputs";
      const DLTensor* a = Entry(EntryID(in[0]));
      const DLTensor* b = Entry(EntryID(in[1]));
      const DLTensor* out = Entry(EntryID(nid, 0));
      int64_t n = 1;
      for (int d = 0; d < out->ndim; ++d) n *= out->shape[d];
      const float* x = Data(a);
      const float* y = Data(b);
      float* z = const_cast<float*>(Data(out));
      for (int64_t i = 0; i < n; ++i) z[i] = op == "add" ? x[i] + y[i] : op == "subtract" ? x[i] - y[i] : x[i] * y[i];
    }
  }

 private:
  // A graph output is the caller's tensor (data_entry_); any other kernel output is ours.
  const DLTensor* Entry(uint32_t eid) const {
    if (data_entry_[eid]) return data_entry_[eid];
    auto it = intermediate_.find(eid);
    ICHECK(it != intermediate_.end()) << "tvmrt_json: entry " << eid << " has no tensor";
    return it->second;
  }

  static const float* Data(const DLTensor* t) {
    return reinterpret_cast<const float*>(static_cast<const char*>(t->data) + t->byte_offset);
  }

  std::vector<NDArray> owned_;
  std::unordered_map<uint32_t, const DLTensor*> intermediate_;
};

}  // namespace

TVM_REGISTER_GLOBAL("runtime.module.loadbinary_tvmrt_json")
    .set_body_typed(JSONRuntimeBase::LoadFromBinary<ElementwiseRuntime>);
TVM_REGISTER_GLOBAL("tvmrt_json.create").set_body_typed([](String symbol, String graph, Array<String> consts) {
  return Module(make_object<ElementwiseRuntime>(symbol, graph, consts));
});
