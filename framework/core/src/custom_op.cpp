// Names of the custom ops seen so far (see custom_op.hpp).
#include "ablate/custom_op.hpp"

#include <algorithm>
#include <mutex>
#include <set>

namespace ablate {

namespace {
std::mutex& names_mutex() {
  static std::mutex m;
  return m;
}
std::set<std::string>& names() {
  static std::set<std::string> s;
  return s;
}
}  // namespace

void register_custom_op(const char* name) {
  std::lock_guard<std::mutex> lock(names_mutex());
  names().insert(name);
}

bool is_custom_op(const std::string& name) {
  std::lock_guard<std::mutex> lock(names_mutex());
  return names().count(name) > 0;
}

std::vector<std::string> custom_op_names() {
  std::lock_guard<std::mutex> lock(names_mutex());
  return std::vector<std::string>(names().begin(), names().end());
}

}  // namespace ablate
