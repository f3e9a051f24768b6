// Suggestions and list formatting for error messages.
#include "ablate/error.hpp"

#include <algorithm>
#include <cmath>
#include <charconv>
#include <cstdio>

namespace ablate {

// Optimal string alignment distance: Levenshtein plus adjacent transpositions, so
// "gleu" is one edit from "gelu".
static size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      d[i][j] = std::min(
          {d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    if (d < best_d) best_d = d, best = c;
  }
  if (!best.empty() || word.size() < 3) return best;
  // An abbreviation: the one candidate that starts with the word.
  for (const auto& c : candidates) {
    if (c.compare(0, word.size(), word) != 0) continue;
    if (!best.empty()) return "";  // ambiguous
    best = c;
  }
  return best;
}

namespace {
template <class T>
void append_shortest(std::string& s, T v) {
  char b[64];
  const auto r = std::to_chars(b, b + sizeof b, v);  // shortest round trip, "inf", "nan"
  s.append(b, r.ptr);
}
}  // namespace
void detail::append_number(std::string& s, double v) { append_shortest(s, v); }
void detail::append_number(std::string& s, float v) { append_shortest(s, v); }

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < items.size(); ++i) s += (i ? sep : "") + items[i];
  return s;
}

std::string hms(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const long v = static_cast<long>(seconds + 0.5);
  char buf[32];
  if (v >= 3600) std::snprintf(buf, sizeof buf, "%ld:%02ld:%02ld", v / 3600, (v / 60) % 60, v % 60);
  else std::snprintf(buf, sizeof buf, "%02ld:%02ld", v / 60, v % 60);
  return buf;
}

}  // namespace ablate
