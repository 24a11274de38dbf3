// Containers across the C++ boundary.

#include "runtime.h"

using namespace tvm::runtime;
using namespace tvmrt;

namespace tvmrt {

// ---------------------------------------------------------------------------------------------
// Containers. Hosts read arrays and maps with the headers' inline code, so an Array or a Map that
// crosses to a C++ host is rebuilt with upstream's layouts (ArrayNode; SmallMapNode up to 4 entries,
// DenseMapNode beyond), and one that comes back is rebuilt as this runtime's own.


struct KV {
  Object* key;
  Object* value;
};

// ArrayNode: the header, int64 size_ and capacity_, then the elements.
struct HostArray {
  Object header;
  int64_t size_;
  int64_t capacity_;
  Object** elems() { return reinterpret_cast<Object**>(this + 1); }
};
static_assert(sizeof(HostArray) == 32, "upstream's ArrayNode header is 32 bytes");

// ADTObj (a tuple of the Relay VM's): the header, uint32 tag and size, then the fields.
struct HostAdt {
  Object header;
  uint32_t tag;
  uint32_t size;
  Object** fields() { return reinterpret_cast<Object**>(this + 1); }
};
static_assert(sizeof(HostAdt) == 24, "upstream's ADTObj header is 24 bytes");

// MapNode: the header, uint64 slots_ and size_; a SmallMapNode's pairs follow, a DenseMapNode has
// uint32 fib_shift_ and a pointer to blocks of 16 metadata bytes and 16 pairs.
struct HostMap {
  Object header;
  uint64_t slots_;
  uint64_t size_;
};
struct HostDenseMap : HostMap {
  uint32_t fib_shift_;
  unsigned char* data_;
};
static_assert(sizeof(HostMap) == 32 && sizeof(HostDenseMap) == 48, "upstream's MapNode layouts");

constexpr int kBlockCap = 16;
constexpr size_t kBlockBytes = kBlockCap + kBlockCap * sizeof(KV);
constexpr uint8_t kEmptySlot = 0xFF;

void DeleteHostArray(Object* obj) {
  auto* a = reinterpret_cast<HostArray*>(obj);
  for (int64_t i = 0; i < a->size_; ++i) DecRef(a->elems()[i]);
  ::operator delete(a);
}

void DeleteHostAdt(Object* obj) {
  auto* a = reinterpret_cast<HostAdt*>(obj);
  for (uint32_t i = 0; i < a->size; ++i) DecRef(a->fields()[i]);
  ::operator delete(a);
}

void DeleteSmallMap(Object* obj) {
  auto* m = reinterpret_cast<HostMap*>(obj);
  auto* kv = reinterpret_cast<KV*>(m + 1);
  for (uint64_t i = 0; i < m->size_; ++i) {
    DecRef(kv[i].key);
    DecRef(kv[i].value);
  }
  ::operator delete(m);
}

void DeleteDenseMap(Object* obj) {
  auto* m = reinterpret_cast<HostDenseMap*>(obj);
  uint64_t n_blocks = (m->slots_ + 1) / kBlockCap;
  for (uint64_t b = 0; b < n_blocks; ++b) {
    unsigned char* block = m->data_ + b * kBlockBytes;
    auto* kv = reinterpret_cast<KV*>(block + kBlockCap);
    for (int j = 0; j < kBlockCap; ++j) {
      if (block[j] != kEmptySlot) {
        DecRef(kv[j].key);
        DecRef(kv[j].value);
      }
    }
  }
  delete[] m->data_;
  ::operator delete(m);
}

// ObjectHash of the headers: the stable byte hash for strings, the address otherwise.
uint64_t HashOf(const Object* key) {
  if (!key || key->type_index_ != kStringIndex) return reinterpret_cast<uint64_t>(key);
  std::string s = StringOf(key);
  const uint64_t kMultiplier = 1099511628211ULL, kMod = 2147483647ULL;
  uint64_t result = 0;
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, s.data() + i, 8);  // little endian, as the hash reads it here
    result = (result * kMultiplier + word) % kMod;
  }
  if (i < s.size()) {
    uint64_t word = 0;
    std::memcpy(&word, s.data() + i, s.size() - i);
    result = (result * kMultiplier + word) % kMod;
  }
  return result;
}

Object* MakeHostArray(const std::vector<Object*>& items) {  // takes the items' counts
  auto* a = static_cast<HostArray*>(::operator new(sizeof(HostArray) + items.size() * sizeof(Object*)));
  a->header.type_index_ = kArrayIndex;
  new (&a->header.ref_counter_) std::atomic<int32_t>(1);
  a->header.deleter_ = DeleteHostArray;
  a->size_ = a->capacity_ = static_cast<int64_t>(items.size());
  for (size_t i = 0; i < items.size(); ++i) a->elems()[i] = items[i];
  return &a->header;
}

Object* MakeHostAdt(uint32_t tag, const std::vector<Object*>& fields) {  // takes the fields' counts
  auto* a = static_cast<HostAdt*>(::operator new(sizeof(HostAdt) + fields.size() * sizeof(Object*)));
  a->header.type_index_ = kAdtIndex;
  new (&a->header.ref_counter_) std::atomic<int32_t>(1);
  a->header.deleter_ = DeleteHostAdt;
  a->tag = tag;
  a->size = static_cast<uint32_t>(fields.size());
  for (size_t i = 0; i < fields.size(); ++i) a->fields()[i] = fields[i];
  return &a->header;
}

// A DenseMapNode holding `pairs` (their counts taken), or null when `slots` is too small for the
// short probe sequences used here. Every key's list head sits where its hash points (heads are
// placed first, so no later entry takes a head's slot), and the others hang off their head's list
// within 15 slots: exactly what the headers' lookup and iteration walk.
Object* TryDenseMap(const std::vector<KV>& pairs, uint64_t slots, uint32_t fib_shift) {
  std::vector<uint8_t> meta(slots, kEmptySlot);
  std::vector<int64_t> at(pairs.size(), -1);
  std::vector<uint64_t> home(pairs.size());
  const uint64_t coeff = 11400714819323198485ull;
  for (size_t i = 0; i < pairs.size(); ++i) {
    home[i] = (coeff * HashOf(pairs[i].key)) >> fib_shift;
    if (meta[home[i]] == kEmptySlot) {
      meta[home[i]] = 0x00;  // the head of a list, no next yet
      at[i] = static_cast<int64_t>(home[i]);
    }
  }
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (at[i] >= 0) continue;
    uint64_t tail = home[i];
    while ((meta[tail] & 0x7F) != 0) tail = (tail + (meta[tail] & 0x7F)) & (slots - 1);
    uint8_t jump = 0;
    for (uint8_t j = 1; j < kBlockCap; ++j) {
      if (meta[(tail + j) & (slots - 1)] == kEmptySlot) {
        jump = j;
        break;
      }
    }
    if (jump == 0) return nullptr;
    uint64_t slot = (tail + jump) & (slots - 1);
    meta[tail] = static_cast<uint8_t>((meta[tail] & 0x80) | jump);
    meta[slot] = 0x80;  // in a list, no next yet
    at[i] = static_cast<int64_t>(slot);
  }
  auto* m = static_cast<HostDenseMap*>(::operator new(sizeof(HostDenseMap)));
  m->header.type_index_ = kMapIndex;
  new (&m->header.ref_counter_) std::atomic<int32_t>(1);
  m->header.deleter_ = DeleteDenseMap;
  m->slots_ = slots - 1;
  m->size_ = pairs.size();
  m->fib_shift_ = fib_shift;
  m->data_ = new unsigned char[slots / kBlockCap * kBlockBytes];
  for (uint64_t s = 0; s < slots; ++s) m->data_[s / kBlockCap * kBlockBytes + s % kBlockCap] = meta[s];
  for (size_t i = 0; i < pairs.size(); ++i) {
    uint64_t s = static_cast<uint64_t>(at[i]);
    auto* kv = reinterpret_cast<KV*>(m->data_ + s / kBlockCap * kBlockBytes + kBlockCap) + s % kBlockCap;
    *kv = pairs[i];
  }
  return &m->header;
}

Object* MakeHostMap(const std::vector<KV>& pairs) {  // takes the pairs' counts
  if (pairs.size() <= 4) {
    auto* m = static_cast<HostMap*>(::operator new(sizeof(HostMap) + pairs.size() * sizeof(KV)));
    m->header.type_index_ = kMapIndex;
    new (&m->header.ref_counter_) std::atomic<int32_t>(1);
    m->header.deleter_ = DeleteSmallMap;
    m->slots_ = m->size_ = pairs.size();
    auto* kv = reinterpret_cast<KV*>(m + 1);
    for (size_t i = 0; i < pairs.size(); ++i) kv[i] = pairs[i];
    return &m->header;
  }
  // At most half full, a power of two (and whole blocks); larger until every list fits.
  uint64_t slots = 16;
  uint32_t fib_shift = 60;
  while (slots < pairs.size() * 2) {
    slots <<= 1;
    fib_shift -= 1;
  }
  for (;; slots <<= 1, fib_shift -= 1) {
    if (Object* m = TryDenseMap(pairs, slots, fib_shift)) return m;
  }
}

Object* ItemOfNative(Object* array, int64_t i) {
  TVMValue a, b;
  a.v_handle = array;
  b.v_int64 = i;
  int code = 0;
  TVMValue r = CallGlobal("runtime.ArrayGetItem", {a, b}, {kTVMObjectHandle, kDLInt}, &code);
  if (code == kTVMNDArrayHandle) return ArrayObject(static_cast<TVMArrayHandle>(r.v_handle));
  return static_cast<Object*>(r.v_handle);
}

int64_t SizeOfNative(Object* array) {
  TVMValue a;
  a.v_handle = array;
  int code = 0;
  return CallGlobal("runtime.ArraySize", {a}, {kTVMObjectHandle}, &code).v_int64;
}

// An object as a host sees it: this runtime's arrays and maps rebuilt with upstream's layouts
// (recursively), anything else as it is. Takes one count of `obj`, returns one.
Object* ToHost(Object* obj) {
  if (!obj || !tvmrt_object_is_native(obj)) return obj;
  if (obj->type_index_ == kModuleIndex) {
    // A stand-in for one of the host's own modules: the host gets its object back.
    auto* host = static_cast<Object*>(tvmrt_module_host_object(obj));
    if (!host) return obj;
    IncRef(host);
    DecRef(obj);
    return host;
  }
  if (obj->type_index_ == kArrayIndex) {
    int64_t n = SizeOfNative(obj);
    std::vector<Object*> items;
    for (int64_t i = 0; i < n; ++i) items.push_back(ToHost(ItemOfNative(obj, i)));
    DecRef(obj);
    return MakeHostArray(items);
  }
  if (obj->type_index_ == kAdtIndex) {
    TVMValue a[2];
    a[0].v_handle = obj;
    int code = 0;
    int64_t n = CallGlobal("runtime.GetADTSize", {a[0]}, {kTVMObjectHandle}, &code).v_int64;
    uint32_t tag = static_cast<uint32_t>(CallGlobal("runtime.GetADTTag", {a[0]}, {kTVMObjectHandle}, &code).v_int64);
    std::vector<Object*> fields;
    for (int64_t i = 0; i < n; ++i) {
      a[1].v_int64 = i;
      TVMValue r = CallGlobal("runtime.GetADTFields", {a[0], a[1]}, {kTVMObjectHandle, kDLInt}, &code);
      Object* item = code == kTVMNDArrayHandle ? ArrayObject(static_cast<TVMArrayHandle>(r.v_handle))
                                               : static_cast<Object*>(r.v_handle);
      fields.push_back(ToHost(item));
    }
    DecRef(obj);
    return MakeHostAdt(tag, fields);
  }
  if (obj->type_index_ == kMapIndex) {
    TVMValue a;
    a.v_handle = obj;
    int code = 0;
    auto* flat = static_cast<Object*>(CallGlobal("runtime.MapItems", {a}, {kTVMObjectHandle}, &code).v_handle);
    int64_t n = SizeOfNative(flat);
    std::vector<KV> pairs;
    for (int64_t i = 0; i + 1 < n; i += 2) pairs.push_back(KV{ToHost(ItemOfNative(flat, i)), ToHost(ItemOfNative(flat, i + 1))});
    DecRef(flat);
    DecRef(obj);
    return MakeHostMap(pairs);
  }
  return obj;
}

// The elements of a container with upstream's layout, borrowed.
std::vector<Object*> HostArrayItems(Object* obj) {
  auto* a = reinterpret_cast<HostArray*>(obj);
  return std::vector<Object*>(a->elems(), a->elems() + a->size_);
}

std::vector<KV> HostMapPairs(Object* obj) {
  auto* m = reinterpret_cast<HostMap*>(obj);
  std::vector<KV> out;
  if (m->slots_ <= 4) {
    auto* kv = reinterpret_cast<KV*>(m + 1);
    out.assign(kv, kv + m->size_);
    return out;
  }
  auto* d = reinterpret_cast<HostDenseMap*>(obj);
  for (uint64_t s = 0; s <= d->slots_; ++s) {
    unsigned char* block = d->data_ + s / kBlockCap * kBlockBytes;
    if (block[s % kBlockCap] == kEmptySlot || block[s % kBlockCap] == 0xFE) continue;
    out.push_back(reinterpret_cast<KV*>(block + kBlockCap)[s % kBlockCap]);
  }
  return out;
}

// An element passed on to this runtime: strings as characters (the core makes its own), shape
// tuples and containers rebuilt as its own; values are appended to `values`/`codes`, and what must
// be released after the call to `hold`.
void PushNative(Object* item, std::vector<TVMValue>& values, std::vector<int>& codes, std::deque<std::string>& strings,
                std::vector<Object*>& hold) {
  TVMValue v;
  if (item && !tvmrt_object_is_native(item) && item->type_index_ == kStringIndex) {
    strings.push_back(StringOf(item));
    v.v_str = strings.back().c_str();
    values.push_back(v);
    codes.push_back(kTVMStr);
    return;
  }
  IncRef(item);
  Object* own = ToNative(item);
  hold.push_back(own);
  v.v_handle = own;
  values.push_back(v);
  codes.push_back(own ? kTVMObjectHandle : kTVMNullptr);
}

// An object as this runtime keeps it: a host's (or this layer's) arrays, maps and shape tuples
// rebuilt as its own, anything else as it is. Takes one count of `obj`, returns one.
Object* ToNative(Object* obj) {
  if (!obj || tvmrt_object_is_native(obj)) return obj;
  if (obj->type_index_ == kShapeTupleIndex) {
    Object* own = OwnShapeTuple(obj);
    DecRef(obj);
    return own;
  }
  if (obj->type_index_ != kArrayIndex && obj->type_index_ != kMapIndex && obj->type_index_ != kAdtIndex) return obj;
  std::vector<TVMValue> values;
  std::vector<int> codes;
  std::deque<std::string> strings;  // the characters stay where values point
  std::vector<Object*> hold;
  const char* make = obj->type_index_ == kArrayIndex ? "runtime.Array" : "runtime.Map";
  if (obj->type_index_ == kAdtIndex) {
    auto* adt = reinterpret_cast<HostAdt*>(obj);
    TVMValue tag;
    tag.v_int64 = adt->tag;
    values.push_back(tag);
    codes.push_back(kDLInt);
    for (uint32_t i = 0; i < adt->size; ++i) PushNative(adt->fields()[i], values, codes, strings, hold);
    make = "runtime.ADT";
  } else if (obj->type_index_ == kArrayIndex) {
    for (Object* item : HostArrayItems(obj)) PushNative(item, values, codes, strings, hold);
  } else {
    for (const KV& kv : HostMapPairs(obj)) {
      PushNative(kv.key, values, codes, strings, hold);
      PushNative(kv.value, values, codes, strings, hold);
    }
  }
  int code = 0;
  TVMValue r;
  try {
    r = CallGlobal(make, values, codes, &code);
  } catch (...) {
    for (Object* o : hold) DecRef(o);
    DecRef(obj);
    throw;
  }
  for (Object* o : hold) DecRef(o);
  DecRef(obj);
  return static_cast<Object*>(r.v_handle);
}

}  // namespace tvmrt
