// StateDict: named tensors in insertion order (a module's registration order, an optimizer's
// parameter order), as PyTorch's state_dict() is an OrderedDict; looked up by name like a map.
#pragma once

#include <initializer_list>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "framework/tensor/tensor.h"

namespace demi {

class StateDict {
 public:
  using value_type = std::pair<std::string, Tensor>;
  using const_iterator = std::vector<value_type>::const_iterator;

  StateDict() = default;
  StateDict(std::initializer_list<value_type> items) {
    for (const value_type& item : items) emplace(item.first, item.second);
  }
  // From a sorted map (older call sites and tests): the map's order.
  StateDict(const std::map<std::string, Tensor>& items) {  // NOLINT: implicit on purpose
    for (const auto& [key, value] : items) emplace(key, value);
  }

  // Adds key at the end; returns false (and changes nothing) when key is already present.
  bool emplace(const std::string& key, const Tensor& value) {
    if (index_.count(key)) return false;
    index_.emplace(key, items_.size());
    items_.emplace_back(key, value);
    return true;
  }
  // The tensor under key, added (undefined) at the end when absent.
  Tensor& operator[](const std::string& key) {
    if (!index_.count(key)) emplace(key, Tensor());
    return items_[index_.at(key)].second;
  }
  const Tensor& at(const std::string& key) const {
    auto it = index_.find(key);
    DEMI_CHECK(it != index_.end(), "StateDict: no key '", key, "'");
    return items_[it->second].second;
  }
  Tensor& at(const std::string& key) { return const_cast<Tensor&>(static_cast<const StateDict&>(*this).at(key)); }
  const_iterator find(const std::string& key) const {
    auto it = index_.find(key);
    return it == index_.end() ? items_.end() : items_.begin() + static_cast<std::ptrdiff_t>(it->second);
  }
  // Removes key (keeping the others' order); returns how many were removed (0 or 1).
  size_t erase(const std::string& key) {
    auto it = index_.find(key);
    if (it == index_.end()) return 0;
    items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(it->second));
    index_.clear();
    for (size_t i = 0; i < items_.size(); ++i) index_.emplace(items_[i].first, i);
    return 1;
  }
  size_t count(const std::string& key) const { return index_.count(key); }
  bool contains(const std::string& key) const { return index_.count(key) > 0; }

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  std::vector<std::string> keys() const {
    std::vector<std::string> out;
    for (const value_type& item : items_) out.push_back(item.first);
    return out;
  }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }  // keys are read-only: the index depends on them

 private:
  std::vector<value_type> items_;
  std::unordered_map<std::string, size_t> index_;
};

}  // namespace demi
