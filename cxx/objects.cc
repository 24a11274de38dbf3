// The object protocol.

#include "runtime.h"

using namespace tvm::runtime;
using namespace tvmrt;

// ---------------------------------------------------------------------------------------------
// The object protocol: static types from the core, types hosts define allocated here.

// The type table lives in the core (src/object/type_table.rs), shared with the C API.

uint32_t Object::TypeKey2Index(const std::string& key) {
  unsigned index = 0;
  Check(TVMObjectTypeKey2Index(key.c_str(), &index));
  return index;
}

std::string Object::TypeIndex2Key(uint32_t tindex) {
  char* key = nullptr;
  Check(TVMObjectTypeIndex2Key(tindex, &key));
  std::string out(key);
  std::free(key);
  return out;
}

size_t Object::TypeIndex2KeyHash(uint32_t tindex) { return std::hash<std::string>()(TypeIndex2Key(tindex)); }

uint32_t Object::GetOrAllocRuntimeTypeIndex(const std::string& key, uint32_t static_tindex, uint32_t parent_tindex,
                                            uint32_t num_child_slots, bool child_slots_can_overflow) {
  uint32_t index = 0;
  Check(tvmrt_type_index_alloc(key.c_str(), static_tindex, parent_tindex, num_child_slots,
                               child_slots_can_overflow, &index));
  return index;
}

bool Object::DerivedFrom(uint32_t parent_tindex) const {
  int derived = 0;
  Check(TVMObjectDerivedFrom(type_index_, parent_tindex, &derived));
  return derived != 0;
}
