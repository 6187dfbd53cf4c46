// Device: where a tensor's storage lives (the CPU, or CUDA device i).
#pragma once

#include <ostream>
#include <string>

namespace demi {

class Device {
 public:
  enum class Kind { CPU, CUDA };

  static Device cpu() { return Device(Kind::CPU, 0); }
  static Device cuda(int index = 0) { return Device(Kind::CUDA, index); }

  Kind kind() const { return kind_; }
  int index() const { return index_; }
  bool is_cpu() const { return kind_ == Kind::CPU; }
  bool is_cuda() const { return kind_ == Kind::CUDA; }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index_); }

  bool operator==(const Device& o) const { return kind_ == o.kind_ && index_ == o.index_; }
  bool operator!=(const Device& o) const { return !(*this == o); }

 private:
  Device(Kind kind, int index) : kind_(kind), index_(index) {}
  Kind kind_;
  int index_;
};

inline std::ostream& operator<<(std::ostream& out, const Device& d) { return out << d.str(); }
inline std::ostream& operator<<(std::ostream& out, Device::Kind k) {
  return out << (k == Device::Kind::CPU ? "cpu" : "cuda");
}

}  // namespace demi
