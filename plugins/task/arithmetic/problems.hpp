// The arithmetic task plugin's problems (REFERENCE.md "Arithmetic task"; format rules in
// docs/ARITHMETIC.md): problem generation `$(0000753.78+0000000910)=87.3661000$`, parsing of
// problem lines, the exact-match scorer with breakdowns. Private to the plugin (arithmetic.cpp
// registers it) and its tests (tests/model/test_arithmetic.cpp compiles problems.cpp).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "ablate/generate.hpp"
#include "ablate/model.hpp"
#include "ablate/tokenizer.hpp"

namespace ablate::arithmetic {

// ---- numbers --------------------------------------------------------------------------
// An exact decimal: value = units / 10^scale. Results are computed exactly in integers.
struct Decimal {
  int64_t units = 0;
  int scale = 0;
};
// Shortest text: no trailing fractional zeros, no point for whole numbers, '-' for
// negatives ("1663.78", "803", "-134.14", "1.5").
std::string format_decimal(Decimal d);
// Parses "[-]digits[.digits]" (leading zeros allowed); Error otherwise.
Decimal parse_decimal(const std::string& text);
// a op b with op in + - * /, rounded (half away from zero) to at most `decimals` places.
// Division by zero is an Error.
Decimal compute(Decimal a, char op, Decimal b, int decimals);

// ---- generation -----------------------------------------------------------------------
struct FormatOptions {
  bool reversed = true;   // answer written least-significant character first
  bool zero_pad = true;   // operands and answer left-padded with '0' (before reversal)
  int width = 10;         // operand width when zero padded
  int answer_width = 10;  // answer width when zero padded
};

struct GeneratorOptions {
  std::string ops = "+-*/";       // operations drawn uniformly
  double min = 0.01, max = 1000;  // operands on their grid within [min, max]: (0, 1000] by default
  int decimals = 2;               // places of an operand drawn with decimals (0: integers only)
  double decimal_fraction = 0.5;  // probability that an operand is drawn with decimals
  int answer_decimals = 2;        // results rounded to this many places (division: 400/344 -> 1.16)
  FormatOptions format;
  uint64_t seed = 1;
};

struct Problem {
  Decimal a, b;
  char op = '+';
};

// Checks options (an Error says which and how to fix); draws problems.
class Generator {
 public:
  explicit Generator(const GeneratorOptions& o);
  Problem next();
  const GeneratorOptions& options() const { return o_; }

 private:
  Decimal draw_operand();
  GeneratorOptions o_;
  Rng rng_;
};

// Characters of the widest operand and of the widest answer the options can produce (for
// default widths: the original's operand range (0, 1000] with 2 decimals gives 7 and 10).
int widest_operand(const GeneratorOptions& o);
int widest_answer(const GeneratorOptions& o);

// The line of a problem, without newline: "$(" a op b ")=" answer "$". Error if an
// operand or the answer is wider than its zero-padding width.
std::string format_problem(const Problem& p, const FormatOptions& f, int answer_decimals);

// Disjoint train and test sets: test lines are distinct; train lines may repeat (as random
// sampling does) but never equal a test line or a line of `exclude`. Error when the
// problem space is too small for the counts asked.
struct Split {
  std::vector<std::string> train, test;
};
Split generate_split(const GeneratorOptions& o, int64_t train_count, int64_t test_count,
                     const std::unordered_set<std::string>& exclude = {});

// ---- problem lines ----------------------------------------------------------------------
struct ParsedProblem {
  std::string line;    // without newline
  std::string prompt;  // everything up to and including '='
  std::string answer;  // the reference: characters after '=' before the final '$'
  char op = '+';
  std::string a, b;       // operands without zero padding
  int carries = -1;       // column carries of a + b, borrows of |a - b|; -1 for * and /
  int points = 0;         // which operands have a decimal point: 2 * (a has one) + (b has one)
  int answer_length = 0;  // characters of the answer without zero padding
};
// Parses "$(A op B)=ANSWER$"; `reversed` says how to strip padding for answer_length.
// Error (naming the text) if the line is not a problem.
ParsedProblem parse_problem(const std::string& line, bool reversed = true);
// Reads a problem file (blank lines skipped); errors name path:line. max > 0 keeps the
// first max problems. Whether answers are reversed is detected from the file (most lines
// whose answer checks out against the operands decide).
std::vector<ParsedProblem> read_problems(const std::string& path, int64_t max = 0);
bool detect_reversed(const std::vector<std::string>& lines);

// ---- scoring ------------------------------------------------------------------------------
// REFERENCE.md: the prediction is the generated text before the first '$' (all of it if
// there is none), padded or trimmed to the reference length; padding never matches.
struct AnswerScore {
  std::string prediction;  // generated text before '$'
  int64_t matched = 0, total = 0;
  bool exact = false;                // every reference character matched
  bool strict = false;               // prediction == reference and '$' was produced right after it
  std::vector<uint8_t> position_ok;  // per reference character
};
AnswerScore score_answer(const std::string& reference, const std::string& generated);

struct Bin {
  int64_t problems = 0, exact = 0, chars = 0, matched = 0;
  double exact_match() const;    // NaN when empty
  double char_accuracy() const;  // NaN when empty
};

// The breakdown keys a problem set can produce. Fixed from the whole problem file so that
// every evaluation (of any subset) reports the same columns.
struct Layout {
  std::vector<char> ops;
  std::vector<int> lengths;
  std::vector<std::pair<char, int>> carries;  // ('+', k carries), ('-', k borrows)
  std::vector<std::pair<char, int>> points;   // (op, ParsedProblem::points)
  int positions = 0;
};
Layout layout_of(const std::vector<ParsedProblem>& problems);

struct Report {
  Bin all;
  int64_t strict = 0;
  std::map<char, Bin> by_op;
  std::map<int, Bin> by_length;
  std::map<std::pair<char, int>, Bin> by_carries;
  std::map<std::pair<char, int>, Bin> by_points;  // (op, ParsedProblem::points)
  std::vector<Bin> by_position;  // problems = answers that long, matched = right at that position
  double seconds = 0;
  void add(const ParsedProblem& p, const AnswerScore& s);
  double problems_per_s() const {
    return seconds > 0 ? static_cast<double>(all.problems) / seconds : 0;
  }
  // Named scalars for the run file: exact_match, char_accuracy, exact_match_strict,
  // problems, problems_per_s and (with breakdowns) em_<op>, char_acc_<op>, em_len_<n>,
  // em_add_carries_<k>, em_sub_borrows_<k>, em_<op>_<int|dec>_<int|dec> (operands without
  // or with a decimal point), acc_pos_<i>. Empty bins are NaN.
  std::vector<std::pair<std::string, double>> row(const Layout& layout, bool breakdowns) const;
};
// "add", "sub", "mul", "div" (column names avoid HDF5's '/').
const char* op_name(char op);
// "int_int", "int_dec", "dec_int", "dec_dec" for ParsedProblem::points 0..3.
const char* points_name(int points);

// ---- evaluation -----------------------------------------------------------------------------
// Decodes every problem's answer (reference length + 1 characters at most) and scores it.
Report evaluate(Model& model, const Tokenizer& tok, const std::vector<ParsedProblem>& problems,
                const DecodeOptions& o, std::vector<AnswerScore>* scores = nullptr);

}  // namespace ablate::arithmetic
