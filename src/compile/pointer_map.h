// A map from pointers to ints for the tracer's per-call bookkeeping (which
// value each traced tensor is). Open addressing in one array that keeps its
// memory from call to call: an unordered_map allocates a node per entry,
// dozens per call of a small graph, and the cache-hit path of a compiled
// call is mostly such allocations.
#pragma once
#include <cstdint>
#include <vector>

namespace kiln::compiler::detail {

class PointerMap {
 public:
  const int* find(const void* key) const {
    if (slots_.empty()) return nullptr;
    for (size_t i = slot_of(key);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i].key == key) return &slots_[i].value;
      if (!slots_[i].key) return nullptr;
    }
  }
  int* find(const void* key) { return const_cast<int*>(static_cast<const PointerMap&>(*this).find(key)); }
  bool contains(const void* key) const { return find(key) != nullptr; }
  // Sets key's value (inserting key).
  void set(const void* key, int value) {
    if (int* v = find(key)) {
      *v = value;
      return;
    }
    if ((used_.size() + 1) * 2 > slots_.size()) grow();
    insert_new(key, value);
  }
  // Sets key's value unless key is there already.
  void add(const void* key, int value) {
    if (!find(key)) set(key, value);
  }
  void clear() {
    for (uint32_t i : used_) slots_[i] = Slot{};
    used_.clear();
  }

 private:
  struct Slot {
    const void* key = nullptr;
    int value = 0;
  };
  size_t slot_of(const void* key) const {
    return static_cast<size_t>((reinterpret_cast<uintptr_t>(key) >> 4) * 0x9E3779B97F4A7C15ull >> 20) &
           (slots_.size() - 1);
  }
  void insert_new(const void* key, int value) {
    size_t i = slot_of(key);
    while (slots_[i].key) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = Slot{key, value};
    used_.push_back(static_cast<uint32_t>(i));
  }
  void grow() {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.empty() ? 64 : old.size() * 2, Slot{});
    used_.clear();
    for (const Slot& s : old)
      if (s.key) insert_new(s.key, s.value);
  }
  std::vector<Slot> slots_;      // a power of two of them, at most half used
  std::vector<uint32_t> used_;   // the occupied slots, to clear just those
};

}  // namespace kiln::compiler::detail
