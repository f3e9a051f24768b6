// The text forms shared by compare.cpp (notes) and compare_format.cpp (tables, CSV): numbers,
// p-values, parameter counts and CSV fields. Internal to the experiments layer.
#pragma once
#include <cmath>
#include <cstdio>
#include <string>

#include "ablate/compare.hpp"

namespace ablate::compare_text {

inline std::string fmt(double v, const char* f = "%.4f") {
  if (std::isnan(v)) return "n/a";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char b[64];
  const double a = std::fabs(v);
  if (a != 0 && (a >= 1e5 || a < 1e-4))
    std::snprintf(b, sizeof b, f[1] == '+' ? "%+.3e" : "%.3e", v);
  else std::snprintf(b, sizeof b, f, v);
  return b;
}

inline std::string fmt_p(double p) {
  if (std::isnan(p)) return "n/a";
  char b[32];
  if (p < 1e-4) std::snprintf(b, sizeof b, "%.1e", p);
  else std::snprintf(b, sizeof b, "%.4f", p);
  return b;
}

inline std::string fmt_params(const GroupResult& g) {
  if (std::isnan(g.params_min)) return "n/a";
  char b[64];
  if (g.params_min == g.params_max) std::snprintf(b, sizeof b, "%.0f", g.params_min);
  else std::snprintf(b, sizeof b, "%.0f-%.0f", g.params_min, g.params_max);
  return b;
}

inline std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string o = "\"";
  for (char c : s) o += c == '"' ? std::string("\"\"") : std::string(1, c);
  return o + "\"";
}

}  // namespace ablate::compare_text
