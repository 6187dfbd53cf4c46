// demi::Error and the check macros: DEMI_CHECK for the caller's mistakes, DEMI_INTERNAL_CHECK for
// ours. Header-only and dependency-free so that every layer, backends included, can throw them.
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace demi {

// Shapes ([N, C, H, W]) print inside error messages; declared here, ahead of the message
// templates, so that they find it.
inline std::ostream& operator<<(std::ostream& out, const std::vector<int64_t>& shape) {
  out << "[";
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  return out << "]";
}

// Thrown for every user mistake (shape/dtype/device mismatch, bad file, misuse of the API) and for
// internal invariant failures; the message names the op, the operands and the fix.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <typename T, typename... Rest>
void append(std::ostringstream& out, const T& first, const Rest&... rest) {
  out << first;
  append(out, rest...);
}

// `file` relative to demi's tree. The library is built with -fmacro-prefix-map (framework/ops/
// conv2d.cpp); a check inlined from an installed header into a user's program expands __FILE__ as
// <prefix>/include/demi/framework/...: that is cut to the same form.
inline const char* source_location(const char* file) {
  constexpr char kInstalled[] = "/include/demi/";
  const char* at = std::strstr(file, kInstalled);
  return at ? at + sizeof(kInstalled) - 1 : file;
}

// Concatenates the message parts with operator<< and appends " (file:line)".
template <typename... Parts>
[[noreturn]] void throw_error(const char* file, int line, const char* prefix, const Parts&... parts) {
  std::ostringstream out;
  out << prefix;
  append(out, parts...);
  out << " (" << source_location(file) << ":" << line << ")";
  throw Error(out.str());
}
}  // namespace detail

}  // namespace demi

// The caller's mistake: the message says what was expected, what arrived and what to do.
#define DEMI_CHECK(cond, ...)                                          \
  do {                                                                 \
    if (!(cond)) ::demi::detail::throw_error(__FILE__, __LINE__, "", __VA_ARGS__); \
  } while (0)

// Our mistake: an invariant of demi itself does not hold.
#define DEMI_INTERNAL_CHECK(cond, ...)                                                       \
  do {                                                                                       \
    if (!(cond))                                                                             \
      ::demi::detail::throw_error(__FILE__, __LINE__, "internal error: " #cond " failed: ", \
                                  __VA_ARGS__);                                              \
  } while (0)

#define DEMI_THROW(...) ::demi::detail::throw_error(__FILE__, __LINE__, "", __VA_ARGS__)
