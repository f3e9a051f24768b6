// The arithmetic task's problems (see problems.hpp; the format rules are in docs/ARITHMETIC.md).
#include "problems.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>

#include "ablate/error.hpp"
#include "ablate/graph.hpp"

namespace ablate::arithmetic {

namespace {

using i128 = __int128;

i128 pow10(int n) {
  i128 p = 1;
  for (int i = 0; i < n; ++i) p *= 10;
  return p;
}

// num / den rounded half away from zero (den != 0).
i128 round_div(i128 num, i128 den) {
  bool neg = (num < 0) != (den < 0);
  i128 n = num < 0 ? -num : num, d = den < 0 ? -den : den;
  i128 q = (2 * n + d) / (2 * d);
  return neg ? -q : q;
}

Decimal make(i128 units, int scale, const char* what) {
  if (units > std::numeric_limits<int64_t>::max() || units < -std::numeric_limits<int64_t>::max())
    throw Error(std::string("arithmetic: ") + what + " overflows 64 bits; use smaller operands");
  return Decimal{static_cast<int64_t>(units), scale};
}

// Drops trailing fractional zeros, so that equal values compare equal.
Decimal normalise(Decimal d) {
  while (d.scale > 0 && d.units % 10 == 0) d.units /= 10, --d.scale;
  return d;
}

bool is_op(char c) { return c == '+' || c == '-' || c == '*' || c == '/'; }

// Zero padding removed: leading '0's that precede a digit or '-' ("000-134.14" -> "-134.14",
// "00000000.5" -> "0.5", "0000000000" -> "0").
std::string unpad(const std::string& s) {
  size_t i = 0;
  while (i + 1 < s.size() && s[i] == '0' &&
         (std::isdigit(static_cast<unsigned char>(s[i + 1])) || s[i + 1] == '-'))
    ++i;
  return s.substr(i);
}

std::string reversed(std::string s) {
  std::reverse(s.begin(), s.end());
  return s;
}

// Integer and fraction digit strings of a non-negative operand text, aligned for columns.
void align(const std::string& a, const std::string& b, std::string& da, std::string& db) {
  auto split = [](const std::string& s, std::string& ip, std::string& fp) {
    size_t dot = s.find('.');
    ip = s.substr(0, dot);
    fp = dot == std::string::npos ? "" : s.substr(dot + 1);
  };
  std::string ai, af, bi, bf;
  split(a, ai, af);
  split(b, bi, bf);
  size_t ni = std::max(ai.size(), bi.size()), nf = std::max(af.size(), bf.size());
  da = std::string(ni - ai.size(), '0') + ai + af + std::string(nf - af.size(), '0');
  db = std::string(ni - bi.size(), '0') + bi + bf + std::string(nf - bf.size(), '0');
}

int count_carries(const std::string& a, const std::string& b) {
  std::string da, db;
  align(a, b, da, db);
  int carry = 0, n = 0;
  for (size_t i = da.size(); i-- > 0;) {
    carry = (da[i] - '0') + (db[i] - '0') + carry >= 10 ? 1 : 0;
    n += carry;
  }
  return n;
}

// Borrows of big - small (big >= small as values).
int count_borrows(const std::string& big, const std::string& small) {
  std::string da, db;
  align(big, small, da, db);
  int borrow = 0, n = 0;
  for (size_t i = da.size(); i-- > 0;) {
    borrow = (da[i] - '0') - (db[i] - '0') - borrow < 0 ? 1 : 0;
    n += borrow;
  }
  return n;
}

int compare(Decimal a, Decimal b) {
  int s = std::max(a.scale, b.scale);
  i128 x = static_cast<i128>(a.units) * pow10(s - a.scale),
       y = static_cast<i128>(b.units) * pow10(s - b.scale);
  return x < y ? -1 : (x > y ? 1 : 0);
}

// "$(A op B)=ANSWER$" split into its parts; false if the line does not have that shape.
bool split_line(const std::string& line, std::string& a, char& op, std::string& b,
                std::string& answer) {
  if (line.size() < 8 || line.compare(0, 2, "$(") != 0 || line.back() != '$') return false;
  size_t close = line.find(")=");
  if (close == std::string::npos) return false;
  std::string inner = line.substr(2, close - 2);
  size_t k = 1;
  while (k < inner.size() && !is_op(inner[k])) ++k;
  if (k + 1 >= inner.size()) return false;
  op = inner[k];
  a = inner.substr(0, k);
  b = inner.substr(k + 1);
  answer = line.substr(close + 2, line.size() - close - 3);
  return true;
}

}  // namespace

// ---- numbers ------------------------------------------------------------------------------

std::string format_decimal(Decimal d) {
  d = normalise(d);
  i128 u = d.units < 0 ? -static_cast<i128>(d.units) : d.units;
  i128 p = pow10(d.scale);
  auto digits = [](i128 v) {
    std::string s;
    do s += static_cast<char>('0' + static_cast<int>(v % 10)), v /= 10;
    while (v > 0);
    return reversed(s);
  };
  std::string s = (d.units < 0 ? "-" : "") + digits(u / p);
  if (d.scale > 0) {
    std::string f = digits(u % p);
    s += "." + std::string(static_cast<size_t>(d.scale) - f.size(), '0') + f;
  }
  return s;
}

Decimal parse_decimal(const std::string& text) {
  size_t i = 0;
  bool neg = false;
  if (i < text.size() && text[i] == '-') neg = true, ++i;
  i128 units = 0;
  int scale = 0, digits = 0;
  bool dot = false;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c == '.' && !dot) {
      dot = true;
    } else if (c >= '0' && c <= '9') {
      units = units * 10 + (c - '0');
      if (dot) ++scale;
      if (++digits > 18) throw Error("arithmetic: number '" + text + "' has more than 18 digits");
    } else {
      throw Error("arithmetic: '" + text + "' is not a decimal number");
    }
  }
  if (digits == 0 || (dot && scale == 0))
    throw Error("arithmetic: '" + text + "' is not a decimal number");
  return make(neg ? -units : units, scale, "number");
}

Decimal compute(Decimal a, char op, Decimal b, int decimals) {
  i128 units;
  int scale;
  if (op == '+' || op == '-') {
    scale = std::max(a.scale, b.scale);
    i128 x = static_cast<i128>(a.units) * pow10(scale - a.scale),
         y = static_cast<i128>(b.units) * pow10(scale - b.scale);
    units = op == '+' ? x + y : x - y;
  } else if (op == '*') {
    scale = a.scale + b.scale;
    units = static_cast<i128>(a.units) * b.units;
  } else if (op == '/') {
    if (b.units == 0) throw Error("arithmetic: division by zero");
    // a/b = a.units 10^b.scale / (b.units 10^a.scale), at `decimals` places.
    scale = decimals;
    units = round_div(static_cast<i128>(a.units) * pow10(b.scale + decimals),
                      static_cast<i128>(b.units) * pow10(a.scale));
  } else {
    throw Error(std::string("arithmetic: unknown operation '") + op + "'; use + - * /");
  }
  if (scale > decimals) {
    units = round_div(units, pow10(scale - decimals));
    scale = decimals;
  }
  return normalise(make(units, scale, "the result"));
}

// ---- generation -----------------------------------------------------------------------------

Generator::Generator(const GeneratorOptions& o) : o_(o), rng_(o.seed ^ 0xA817ull) {
  if (o.ops.empty()) throw Error("arithmetic: no operations; give some of + - * / (e.g. --ops +)");
  for (char c : o.ops)
    if (!is_op(c))
      throw Error(std::string("arithmetic: unknown operation '") + c + "' in '" + o.ops +
                  "'; use + - * /");
  ABLATE_CHECK(o.min >= 0, "arithmetic: operand minimum ", o.min,
               " is negative; operands are >= 0");
  ABLATE_CHECK(o.max >= o.min, "arithmetic: operand maximum ", o.max, " is below the minimum ",
               o.min);
  ABLATE_CHECK(o.max <= 1e12, "arithmetic: operand maximum ", o.max, " is above 1e12");
  ABLATE_CHECK(o.decimals >= 0 && o.decimals <= 6, "arithmetic: decimals ", o.decimals,
               " out of range 0..6");
  ABLATE_CHECK(o.answer_decimals >= 0 && o.answer_decimals <= 6, "arithmetic: answer decimals ",
               o.answer_decimals, " out of range 0..6");
  ABLATE_CHECK(o.decimal_fraction >= 0 && o.decimal_fraction <= 1, "arithmetic: decimal fraction ",
               o.decimal_fraction, " is not in [0, 1]");
  if (o.format.width < 1 || o.format.answer_width < 1 || o.format.width > 40 ||
      o.format.answer_width > 40)
    throw Error("arithmetic: widths must be in 1..40");
  // Operands of a kind without a grid point in range are drawn as the other kind.
  auto grid_hi = [&](int places) {
    double p = std::pow(10.0, places);
    return std::ceil(o.min * p - 1e-6) <= std::floor(o.max * p + 1e-6)
               ? std::floor(o.max * p + 1e-6)
               : -1.0;
  };
  const double int_hi = grid_hi(0), dec_hi = o.decimals > 0 ? grid_hi(o.decimals) : -1.0;
  ABLATE_CHECK(int_hi >= 0 || dec_hi >= 0, "arithmetic: no operand with ", o.decimals,
               " decimals or fewer lies in [", o.min, ", ", o.max,
               "]; widen the range or raise the decimals");
  if (o.ops.find('/') != std::string::npos && int_hi <= 0 && dec_hi <= 0)
    throw Error(
        "arithmetic: division needs non-zero divisors, but every operand in range is 0; raise the "
        "operand maximum");
}

Decimal Generator::draw_operand() {
  int places = (o_.decimals > 0 && rng_.uniform() < o_.decimal_fraction) ? o_.decimals : 0;
  double p = std::pow(10.0, places);
  int64_t lo = static_cast<int64_t>(std::ceil(o_.min * p - 1e-6)),
          hi = static_cast<int64_t>(std::floor(o_.max * p + 1e-6));
  if (lo > hi) {  // this kind has no grid point in range (checked: the other kind has)
    places = places ? 0 : o_.decimals;
    p = std::pow(10.0, places);
    lo = static_cast<int64_t>(std::ceil(o_.min * p - 1e-6));
    hi = static_cast<int64_t>(std::floor(o_.max * p + 1e-6));
  }
  return Decimal{lo + static_cast<int64_t>(rng_.below(static_cast<uint64_t>(hi - lo + 1))), places};
}

Problem Generator::next() {
  Problem p;
  p.op = o_.ops[rng_.below(o_.ops.size())];
  p.a = draw_operand();
  do p.b = draw_operand();
  while (p.op == '/' && p.b.units == 0);
  return p;
}

namespace {
int int_digits(long double v) {
  int n = 1;
  for (long double x = std::floor(v + 1e-9L); x >= 10; x = std::floor(x / 10 + 1e-9L)) ++n;
  return n;
}
int with_fraction(int digits, int places) { return places > 0 ? digits + 1 + places : digits; }
}  // namespace

int widest_operand(const GeneratorOptions& o) {
  bool dec = o.decimals > 0 && o.decimal_fraction > 0;
  return with_fraction(int_digits(o.max), dec ? o.decimals : 0);
}

int widest_answer(const GeneratorOptions& o) {
  const bool dec = o.decimals > 0 && o.decimal_fraction > 0,
             ints = o.decimals == 0 || o.decimal_fraction < 1;
  const int add_places = std::min(dec ? o.decimals : 0, o.answer_decimals);
  // The smallest positive operand bounds a quotient.
  long double smallest = 1e30L;
  if (dec)
    smallest =
        std::min(smallest, std::max(std::ceil(o.min * std::pow(10.0L, o.decimals) - 1e-6L), 1.0L) /
                               std::pow(10.0L, o.decimals));
  if (ints) smallest = std::min(smallest, std::max(std::ceil(o.min - 1e-6L), 1.0L));
  int w = 1;
  for (char op : o.ops) {
    if (op == '+') w = std::max(w, with_fraction(int_digits(2.0L * o.max), add_places));
    if (op == '-')
      w = std::max(
          w, 1 + with_fraction(int_digits(static_cast<long double>(o.max) - o.min), add_places));
    if (op == '*')
      w = std::max(w, with_fraction(int_digits(static_cast<long double>(o.max) * o.max),
                                    std::min(dec ? 2 * o.decimals : 0, o.answer_decimals)));
    if (op == '/') w = std::max(w, with_fraction(int_digits(o.max / smallest), o.answer_decimals));
  }
  return w;
}

std::string format_problem(const Problem& p, const FormatOptions& f, int answer_decimals) {
  auto pad = [&](const std::string& s, int width, const char* what) {
    if (!f.zero_pad) return s;
    if (static_cast<int>(s.size()) > width)
      throw Error(
          std::string("arithmetic: ") + what + " '" + s + "' has " + std::to_string(s.size()) +
          " characters, more than its width " + std::to_string(width) + "; raise --" +
          (what[0] == 'a' && what[1] == 'n' ? "answer-width" : "width") + " or lower --max");
    return std::string(static_cast<size_t>(width) - s.size(), '0') + s;
  };
  std::string answer =
      pad(format_decimal(compute(p.a, p.op, p.b, answer_decimals)), f.answer_width, "answer");
  if (f.reversed) answer = reversed(answer);
  return "$(" + pad(format_decimal(p.a), f.width, "operand") + p.op +
         pad(format_decimal(p.b), f.width, "operand") + ")=" + answer + "$";
}

Split generate_split(const GeneratorOptions& o, int64_t train_count, int64_t test_count,
                     const std::unordered_set<std::string>& exclude) {
  if (train_count < 0 || test_count < 0) throw Error("arithmetic: problem counts must be >= 0");
  Generator gen(o);
  Split s;
  std::unordered_set<std::string> test;
  // A draw budget turns an exhausted problem space into an error instead of a hang.
  const int64_t patience = 200000;
  int64_t misses = 0;
  while (static_cast<int64_t>(s.test.size()) < test_count) {
    std::string line = format_problem(gen.next(), o.format, o.answer_decimals);
    if (exclude.count(line) || !test.insert(line).second) {
      if (++misses > patience + 20 * test_count)
        throw Error("arithmetic: found only " + std::to_string(s.test.size()) +
                    " distinct test problems in " + std::to_string(misses) +
                    " draws; the problem space is too small for " + std::to_string(test_count) +
                    " test problems: lower the test count or widen the operand range");
      continue;
    }
    s.test.push_back(line);
  }
  misses = 0;
  s.train.reserve(static_cast<size_t>(train_count));
  while (static_cast<int64_t>(s.train.size()) < train_count) {
    std::string line = format_problem(gen.next(), o.format, o.answer_decimals);
    if (test.count(line) || exclude.count(line)) {
      if (++misses > patience)
        throw Error("arithmetic: " + std::to_string(misses) +
                    " draws in a row were test problems; the test set " +
                    "covers (nearly) the whole problem space: lower the test count or widen the "
                    "operand range");
      continue;
    }
    misses = 0;
    s.train.push_back(std::move(line));
  }
  return s;
}

// ---- problem lines
// -------------------------------------------------------------------------------

ParsedProblem parse_problem(const std::string& line, bool rev) {
  ParsedProblem p;
  std::string a, b;
  if (!split_line(line, a, p.op, b, p.answer))
    throw Error("'" + line + "' is not an arithmetic problem of the form $(A+B)=ANSWER$");
  p.line = line;
  p.prompt = line.substr(0, line.find(")=") + 2);
  p.a = unpad(a);
  p.b = unpad(b);
  Decimal da, db;
  try {
    da = parse_decimal(p.a);
    db = parse_decimal(p.b);
  } catch (const Error&) {
    throw Error("'" + line + "': operands '" + a + "' and '" + b +
                "' are not both non-negative decimal numbers");
  }
  if (da.units < 0 || db.units < 0)
    throw Error("'" + line + "': negative operands are not supported");
  if (p.answer.empty()) throw Error("'" + line + "': empty answer");
  p.points = 2 * (p.a.find('.') != std::string::npos) + (p.b.find('.') != std::string::npos);
  if (p.op == '+') p.carries = count_carries(p.a, p.b);
  if (p.op == '-')
    p.carries = compare(da, db) >= 0 ? count_borrows(p.a, p.b) : count_borrows(p.b, p.a);
  p.answer_length = static_cast<int>(unpad(rev ? reversed(p.answer) : p.answer).size());
  return p;
}

bool detect_reversed(const std::vector<std::string>& lines) {
  int64_t fwd = 0, rev = 0;
  auto matches = [](const std::string& text, Decimal a, char op, Decimal b) {
    try {
      Decimal got = parse_decimal(unpad(text));
      Decimal want = compute(a, op, b, got.scale);
      return compare(got, want) == 0;
    } catch (const Error&) {
      return false;
    }
  };
  for (size_t i = 0; i < lines.size() && i < 2000; ++i) {
    std::string a, b, answer;
    char op;
    if (!split_line(lines[i], a, op, b, answer)) continue;
    Decimal da, db;
    try {
      da = parse_decimal(unpad(a));
      db = parse_decimal(unpad(b));
    } catch (const Error&) {
      continue;
    }
    if (op == '/' && db.units == 0) continue;
    fwd += matches(answer, da, op, db);
    rev += matches(reversed(answer), da, op, db);
  }
  return rev >= fwd;
}

std::vector<ParsedProblem> read_problems(const std::string& path, int64_t max) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot read the problem file");
  std::vector<std::string> lines;
  std::vector<int64_t> numbers;
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    lines.push_back(std::move(line));
    numbers.push_back(n);
  }
  if (lines.empty())
    throw Error(path + ": no problems in the file; write one with 'ablate data arithmetic'");
  bool rev = detect_reversed(lines);
  std::vector<ParsedProblem> out;
  size_t keep = max > 0 ? std::min(lines.size(), static_cast<size_t>(max)) : lines.size();
  out.reserve(keep);
  for (size_t i = 0; i < keep; ++i) {
    try {
      out.push_back(parse_problem(lines[i], rev));
    } catch (const Error& e) {
      throw Error(path + ":" + std::to_string(numbers[i]) + ": " + e.what());
    }
  }
  return out;
}

// ---- scoring
// ------------------------------------------------------------------------------------------

AnswerScore score_answer(const std::string& reference, const std::string& generated) {
  AnswerScore s;
  size_t stop = generated.find('$');
  s.prediction = generated.substr(0, stop);
  s.total = static_cast<int64_t>(reference.size());
  s.position_ok.resize(reference.size());
  for (size_t i = 0; i < reference.size(); ++i) {
    // Trimmed beyond the reference length; a short prediction is padded with a symbol
    // that matches nothing (padding with '0' would credit a truncated reversed answer
    // with the zeros of the reference's padding).
    s.position_ok[i] = i < s.prediction.size() && s.prediction[i] == reference[i];
    s.matched += s.position_ok[i];
  }
  s.exact = s.matched == s.total;
  s.strict = stop != std::string::npos && s.prediction == reference;
  return s;
}

double Bin::exact_match() const {
  return problems ? static_cast<double>(exact) / static_cast<double>(problems)
                  : std::numeric_limits<double>::quiet_NaN();
}
double Bin::char_accuracy() const {
  return chars ? static_cast<double>(matched) / static_cast<double>(chars)
               : std::numeric_limits<double>::quiet_NaN();
}

const char* op_name(char op) {
  switch (op) {
    case '+': return "add";
    case '-': return "sub";
    case '*': return "mul";
    case '/': return "div";
    default: return "op";
  }
}

const char* points_name(int points) {
  static const char* const kNames[] = {"int_int", "int_dec", "dec_int", "dec_dec"};
  return points >= 0 && points < 4 ? kNames[points] : "unknown";
}

Layout layout_of(const std::vector<ParsedProblem>& problems) {
  Layout l;
  std::map<char, int> ops;
  std::map<int, int> lengths;
  std::map<std::pair<char, int>, int> carries, points;
  for (const auto& p : problems) {
    points[{p.op, p.points}] = 1;
    ops[p.op] = 1;
    lengths[p.answer_length] = 1;
    if (p.carries >= 0) carries[{p.op, p.carries}] = 1;
    l.positions = std::max(l.positions, static_cast<int>(p.answer.size()));
  }
  for (auto& [k, v] : ops) l.ops.push_back(k);
  for (auto& [k, v] : lengths) l.lengths.push_back(k);
  for (auto& [k, v] : carries) l.carries.push_back(k);
  for (auto& [k, v] : points) l.points.push_back(k);
  return l;
}

void Report::add(const ParsedProblem& p, const AnswerScore& s) {
  auto put = [&](Bin& b) {
    ++b.problems;
    b.exact += s.exact;
    b.chars += s.total;
    b.matched += s.matched;
  };
  put(all);
  strict += s.strict;
  put(by_op[p.op]);
  put(by_length[p.answer_length]);
  if (p.carries >= 0) put(by_carries[{p.op, p.carries}]);
  put(by_points[{p.op, p.points}]);
  if (by_position.size() < s.position_ok.size()) by_position.resize(s.position_ok.size());
  for (size_t i = 0; i < s.position_ok.size(); ++i) {
    ++by_position[i].problems;
    ++by_position[i].chars;
    by_position[i].matched += s.position_ok[i];
    by_position[i].exact += s.position_ok[i];
  }
}

std::vector<std::pair<std::string, double>> Report::row(const Layout& layout,
                                                        bool breakdowns) const {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<std::pair<std::string, double>> r = {
      {"exact_match", all.exact_match()},
      {"char_accuracy", all.char_accuracy()},
      {"exact_match_strict",
       all.problems ? static_cast<double>(strict) / static_cast<double>(all.problems) : nan},
      {"problems", static_cast<double>(all.problems)},
      {"problems_per_s", problems_per_s()}};
  if (!breakdowns) return r;
  for (char op : layout.ops) {
    auto it = by_op.find(op);
    r.emplace_back(std::string("em_") + op_name(op),
                   it == by_op.end() ? nan : it->second.exact_match());
    r.emplace_back(std::string("char_acc_") + op_name(op),
                   it == by_op.end() ? nan : it->second.char_accuracy());
  }
  for (int len : layout.lengths) {
    auto it = by_length.find(len);
    r.emplace_back("em_len_" + std::to_string(len),
                   it == by_length.end() ? nan : it->second.exact_match());
  }
  for (const auto& key : layout.carries) {
    auto it = by_carries.find(key);
    r.emplace_back(std::string(key.first == '+' ? "em_add_carries_" : "em_sub_borrows_") +
                       std::to_string(key.second),
                   it == by_carries.end() ? nan : it->second.exact_match());
  }
  for (const auto& key : layout.points) {
    auto it = by_points.find(key);
    r.emplace_back(std::string("em_") + op_name(key.first) + "_" + points_name(key.second),
                   it == by_points.end() ? nan : it->second.exact_match());
  }
  for (int i = 0; i < layout.positions; ++i)
    r.emplace_back("acc_pos_" + std::to_string(i),
                   static_cast<size_t>(i) < by_position.size()
                       ? by_position[static_cast<size_t>(i)].char_accuracy()
                       : nan);
  return r;
}

// ---- evaluation ------------------------------------------------------------------------------

Report evaluate(Model& model, const Tokenizer& tok, const std::vector<ParsedProblem>& problems,
                const DecodeOptions& o, std::vector<AnswerScore>* scores) {
  std::vector<std::string> prompts;
  std::vector<int64_t> max_chars;
  prompts.reserve(problems.size());
  for (const auto& p : problems) {
    prompts.push_back(p.prompt);
    max_chars.push_back(static_cast<int64_t>(p.answer.size()) + 1);  // the answer and its '$'
  }
  auto t0 = std::chrono::steady_clock::now();
  std::vector<std::string> gen = decode_prompts(model, tok, prompts, max_chars, o, "$");
  Report r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (scores) scores->clear();
  for (size_t i = 0; i < problems.size(); ++i) {
    AnswerScore s = score_answer(problems[i].answer, gen[i]);
    r.add(problems[i], s);
    if (scores) scores->push_back(std::move(s));
  }
  return r;
}

}  // namespace ablate::arithmetic
