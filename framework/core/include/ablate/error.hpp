// Errors thrown by library code. Only the CLI prints them and exits non-zero.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace ablate {

// Any error a user can act on: bad config, bad data, bad plugin, bad checkpoint.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A configuration error; the message already names file:line:column and key path.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// Levenshtein-based suggestion: the closest candidate within a small edit distance,
// or "" when nothing is close. Used for every "did you mean" in ablate.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

// A message from its parts: texts as they are, integers in decimal, floating-point numbers
// in the shortest form that reads back to the same value (0.001, 2500000, 1e+20, 0.33333334
// for a float), e.g. message("shard ", path, " holds ", n, " tokens").
namespace detail {
void append_number(std::string& s, double v);
void append_number(std::string& s, float v);
inline void append_part(std::string& s, std::string_view v) { s += v; }
inline void append_part(std::string& s, char c) { s += c; }
template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
void append_part(std::string& s, T v) {
  if constexpr (std::is_same_v<T, bool>) s += v ? "true" : "false";
  else if constexpr (std::is_integral_v<T>) s += std::to_string(v);
  else if constexpr (std::is_same_v<T, float>) append_number(s, v);
  else append_number(s, static_cast<double>(v));
}
}  // namespace detail
template <class... Parts>
std::string message(const Parts&... parts) {
  std::string s;
  (detail::append_part(s, parts), ...);
  return s;
}

// "a, b, c" for messages.
std::string join(const std::vector<std::string>& items, const std::string& sep = ", ");
// A duration as "MM:SS" or "H:MM:SS" ("--:--" when negative or not finite).
std::string hms(double seconds);

}  // namespace ablate

// Throws ablate::Error(ablate::message(parts...)) unless `cond` holds: a check on input whose
// message names the bad value, what is allowed and the fix.
//   ABLATE_CHECK(n <= size - 8, path, ": the header length says ", n, " bytes, only ", size - 8,
//                " follow: a truncated file");
#define ABLATE_CHECK(cond, ...)                                         \
  do {                                                                  \
    if (!(cond)) throw ::ablate::Error(::ablate::message(__VA_ARGS__)); \
  } while (0)
