// The arithmetic task (REFERENCE.md "Arithmetic task"; format rules in docs/ARITHMETIC.md):
// `ablate data arithmetic` writes disjoint train and test problem files
// `$(0000753.78+0000000910)=87.3661000$`; the evaluator scores exact match and character
// accuracy with batched KV-cache decoding, with breakdowns by operation, answer length,
// carries and answer position, during training and in `ablate eval --task arithmetic`.
//   eval: [{type: arithmetic, data: test.txt, problems: 1000, batch: 256, greedy: true}]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <unordered_set>

#include "ablate/data_source.hpp"
#include "ablate/error.hpp"
#include "ablate/plugin.hpp"
#include "ablate/task.hpp"
#include "problems.hpp"

namespace {

namespace ar = ablate::arithmetic;

std::string fixed(double v) {
  if (std::isnan(v)) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

// ---- the report of `ablate eval` ------------------------------------------------------------

template <class... A>
void print(std::string& out, const char* fmt, A... a) {
  if constexpr (sizeof...(A) == 0) {
    out += fmt;
  } else {
    char buf[1024];
    std::snprintf(buf, sizeof buf, fmt, a...);
    out += buf;
  }
}

std::string pct(const ablate::arithmetic::Bin& b, bool chars = false) {
  char buf[32];
  double v = chars ? b.char_accuracy() : b.exact_match();
  if (std::isnan(v)) return "     -";
  std::snprintf(buf, sizeof buf, "%6.4f", v);
  return buf;
}

void print_bin(std::string& out, const std::string& label, const ar::Bin& b) {
  print(out, "  %-14s %9lld  %s  %s\n", label.c_str(), static_cast<long long>(b.problems),
        pct(b).c_str(), pct(b, true).c_str());
}

std::string report_text(const ar::Report& r, int64_t show,
                        const std::vector<ar::ParsedProblem>& problems,
                        const std::vector<ar::AnswerScore>& scores) {
  std::string out;
  const auto& a = r.all;
  print(out, "exact match      %.4f  (%lld / %lld)\n", a.exact_match(),
        static_cast<long long>(a.exact), static_cast<long long>(a.problems));
  print(out, "char accuracy    %.4f  (%lld / %lld characters after '=')\n", a.char_accuracy(),
        static_cast<long long>(a.matched), static_cast<long long>(a.chars));
  print(out, "strict match     %.4f  (answer exactly, then '$')\n",
        a.problems ? static_cast<double>(r.strict) / static_cast<double>(a.problems) : 0.0);
  print(out, "speed            %.0f problems/s (%.2f s)\n\n", r.problems_per_s(), r.seconds);
  print(out, "  %-14s %9s  %6s  %6s\n", "by operation", "problems", "exact", "chars");
  for (const auto& [op, b] : r.by_op)
    print_bin(out, std::string(1, op) + " (" + ar::op_name(op) + ")", b);
  print(out, "\n  %-14s %9s  %6s  %6s\n", "answer length", "problems", "exact", "chars");
  for (const auto& [len, b] : r.by_length) print_bin(out, std::to_string(len), b);
  if (!r.by_carries.empty()) {
    print(out, "\n  %-14s %9s  %6s  %6s\n", "carries", "problems", "exact", "chars");
    for (const auto& [key, b] : r.by_carries)
      print_bin(out,
                std::string(1, key.first) + (key.first == '+' ? " carries " : " borrows ") +
                    std::to_string(key.second),
                b);
  }
  print(out, "\n  %-14s %9s  %6s  %6s\n", "operands", "problems", "exact", "chars");
  for (const auto& [key, b] : r.by_points) {
    const std::string n = ar::points_name(key.second);  // "dec_int": a has a point, b none
    print_bin(out, n.substr(0, 3) + " " + std::string(1, key.first) + " " + n.substr(4), b);
  }
  print(out, "\naccuracy per answer position (0 = first character after '='):\n ");
  for (size_t i = 0; i < r.by_position.size(); ++i)
    print(out, " %zu:%s", i, pct(r.by_position[i], true).c_str());
  print(out, "\n");
  if (show > 0) {
    print(out, "\nwrong answers (reference | prediction):\n");
    int64_t shown = 0;
    for (size_t i = 0; i < scores.size() && shown < show; ++i) {
      if (scores[i].exact) continue;
      print(out, "  %s%s$ | %s\n", problems[i].prompt.c_str(), problems[i].answer.c_str(),
            scores[i].prediction.c_str());
      ++shown;
    }
    if (shown == 0) print(out, "  none\n");
  }
  return out;
}

// ---- the evaluator -----------------------------------------------------------------------------

class ArithmeticEvaluator final : public ablate::Evaluator {
 public:
  explicit ArithmeticEvaluator(const ablate::Options& o) {
    data_ = o.require<std::string>(
        "data", "problem file written by 'ablate data arithmetic' (path or data-directory name)");
    problems_ =
        o.get_in<int64_t>("problems", 1000, 0, int64_t{1} << 40,
                          "problems scored at each evaluation (the file's first N; 0: all)");
    final_problems_ =
        o.get_in<int64_t>("final_problems", -1, -1, int64_t{1} << 40,
                          "problems scored at the end of training (-1: as problems; 0: all)");
    final_only_ =
        o.get<bool>("final_only", false,
                    "score only at the end of training (the other evaluations report NaN)");
    decode_.batch = o.get_in<int64_t>("batch", 256, 1, 1 << 20, "sequences decoded together");
    decode_.sampling.greedy =
        o.get<bool>("greedy", true, "argmax decoding; false: sample with temperature and top_k");
    decode_.sampling.temperature =
        o.get_in<float>("temperature", 1.0f, 0.0f, 100.0f, "softmax temperature when sampling");
    decode_.sampling.top_k =
        o.get_in<int64_t>("top_k", 0, 0, 1 << 24, "sample among the k most likely tokens (0: all)");
    breakdowns_ =
        o.get<bool>("breakdowns", true,
                    "also log exact match by operation, answer length, carries and position");
    show_errors_ = o.get_in<int64_t>("show_errors", 5, 0, 1 << 20,
                                     "wrong answers listed in the report of `ablate eval`");
    if (o.describing()) return;
    // Relative names resolve next to the experiment file first (as data.path does).
    std::string yaml_dir;
    const std::string& file = o.source()->file;
    if (std::filesystem::is_regular_file(file))
      yaml_dir = std::filesystem::absolute(file).parent_path().string();
    try {
      path_ = ablate::resolve_data_file(data_, yaml_dir);
      all_ = ar::read_problems(path_);
    } catch (const ablate::ConfigError&) {
      throw;
    } catch (const ablate::Error& e) {
      o.fail(
          "data",
          std::string(e.what()) +
              ". Generate the file first, e.g. 'ablate data arithmetic --train train.txt --test " +
              data_ + "' (see docs/ARITHMETIC.md)");
    }
    // Columns come from the whole file so that every evaluation logs the same ones.
    layout_ = ar::layout_of(all_);
  }

  std::vector<std::pair<std::string, double>> evaluate(ablate::EvalContext& ctx) override {
    int64_t n = ctx.final && final_problems_ >= 0 ? final_problems_ : problems_;
    size_t count = n > 0 ? std::min(all_.size(), static_cast<size_t>(n)) : all_.size();
    if (final_only_ && !ctx.final) {
      ar::Report empty;
      return empty.row(layout_, breakdowns_);
    }
    subset_.assign(all_.begin(), all_.begin() + static_cast<std::ptrdiff_t>(count));
    ablate::DecodeOptions d = decode_;
    d.seed = ctx.seed;
    last_ = ar::evaluate(ctx.model, ctx.tokenizer, subset_, d, &scores_);
    return last_.row(layout_, breakdowns_);
  }

  // "exact 0.7500 (+ 0.80, - 0.70), chars 0.9012, 20 problems, 310 problems/s"
  std::string summary(const std::vector<std::pair<std::string, double>>& row) const override {
    auto get = [&](const std::string& k) {
      for (const auto& [name, v] : row)
        if (name == k) return v;
      return std::nan("");
    };
    std::string ops;
    for (char op : layout_.ops)
      ops += std::string(ops.empty() ? "" : ", ") + op + " " +
             fixed(get(std::string("em_") + ar::op_name(op)));
    return "exact " + fixed(get("exact_match")) +
           (layout_.ops.size() > 1 && breakdowns_ ? " (" + ops + ")" : "") + ", chars " +
           fixed(get("char_accuracy")) + ", " +
           std::to_string(static_cast<int64_t>(get("problems"))) + " problems, " +
           std::to_string(static_cast<int64_t>(get("problems_per_s"))) + " problems/s";
  }

  std::string report() const override { return report_text(last_, show_errors_, subset_, scores_); }

  // Every score is a proportion of problems or characters, better higher; the counts and the
  // speed are neither.
  std::vector<ablate::MetricSpec> metric_specs() const override {
    using ablate::Better;
    return {{"problems", Better::neither, 0},       {"problems_per_s", Better::neither, 0},
            {"exact_match*", Better::higher, 0, 1}, {"char_acc*", Better::higher, 0, 1},
            {"em_*", Better::higher, 0, 1},         {"acc_pos_*", Better::higher, 0, 1}};
  }

 private:
  std::string data_, path_;
  int64_t problems_ = 1000, final_problems_ = -1;
  bool final_only_ = false, breakdowns_ = true;
  int64_t show_errors_ = 5;
  std::vector<ar::ParsedProblem> subset_;  // the last evaluation's problems, scores and report
  std::vector<ar::AnswerScore> scores_;
  ar::Report last_;
  ablate::DecodeOptions decode_;
  std::vector<ar::ParsedProblem> all_;
  ar::Layout layout_;
};

// ---- data ------------------------------------------------------------------------------------

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ablate::Error(path + ": cannot read");
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    if (!l.empty() && l.back() == '\r') l.pop_back();
    if (!l.empty()) lines.push_back(std::move(l));
  }
  return lines;
}

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw ablate::Error(path + ": cannot write");
    for (const auto& l : lines) out << l << '\n';
    if (!out) throw ablate::Error(path + ": write failed (disk full?)");
  }
  std::filesystem::rename(tmp, path);
}

// The flags of `ablate data arithmetic` (--train-count is train_count, ...).
struct GenFlags {
  ar::GeneratorOptions g;
  std::string train, test;
  int64_t train_count = 0, test_count = 0, examples = 3;
  std::vector<std::string> exclude;
};

GenFlags read_generator_flags(const ablate::Options& o) {
  GenFlags f;
  ar::GeneratorOptions& g = f.g;
  f.train = o.get<std::string>("train", "", "training problem file to write");
  f.test = o.get<std::string>(
      "test", "", "test problem file to write (distinct problems, none in the training file)");
  f.train_count = o.get_in<int64_t>("train_count", 100000, 0, int64_t{1} << 32,
                                    "training problems (may repeat, as random sampling does)");
  f.test_count = o.get_in<int64_t>("test_count", 10000, 0, int64_t{1} << 32, "test problems");
  g.ops = o.get<std::string>("ops", "+-*/", "operations, drawn uniformly (e.g. + or +-*/)");
  const int digits =
      o.get_in<int>("digits", 0, 0, 12,
                    "integer operands of up to N digits: min 0, max 10^N-1, decimals 0 (0: off)");
  g.min = o.get<double>("min", 0.01, "smallest operand (with max 1000: the original's (0, 1000])");
  g.max = o.get<double>("max", 1000, "largest operand");
  g.decimals = o.get_in<int>("decimals", 2, 0, 9,
                             "decimal places of operands drawn with decimals (0: integers only)");
  g.decimal_fraction = o.get_in<double>("decimal_fraction", 0.5, 0.0, 1.0,
                                        "probability that an operand has decimals");
  g.answer_decimals = o.get_in<int>("answer_decimals", 2, 0, 9,
                                    "results rounded to this many places (half away from zero)");
  g.format.reversed =
      o.get<bool>("reversed", true, "answer written least-significant character first");
  g.format.zero_pad = o.get<bool>("zero_pad", true, "zero-pad operands and answer to fixed widths");
  g.format.width = o.get_in<int>("width", 10, 1, 64, "operand width with zero padding");
  const int answer_width = o.get_in<int>(
      "answer_width", 0, 0, 64,
      "answer width with zero padding (0: the larger of width and the widest answer)");
  const YAML::Node ex = o.has("exclude") ? YAML::Node(o.node()["exclude"]) : YAML::Node();
  if (o.describing())
    o.get<std::string>("exclude", "",
                       "problem file whose lines neither output may contain (repeatable)");
  else o.mark_used("exclude");
  g.seed = static_cast<uint64_t>(o.get_in<int64_t>("seed", 1, 0, int64_t{1} << 62, "random seed"));
  f.examples = o.get_in<int64_t>("examples", 3, 0, 1000, "example lines to print");
  if (o.describing()) return f;
  if (ex.IsSequence())
    for (const auto& e : ex) f.exclude.push_back(e.as<std::string>());
  else if (ex.IsScalar()) f.exclude.push_back(ex.as<std::string>());
  if (f.train.empty() && f.test.empty()) o.fail("train", "give --train FILE and/or --test FILE");
  if (digits > 0) {
    if (o.has("min") || o.has("max"))
      o.fail("digits", "--digits sets --min and --max; give one or the other");
    if (o.has("decimals") && g.decimals != 0)
      o.fail("digits", "--digits means integer operands; drop --decimals or use --min/--max");
    g.min = 0;
    g.max = std::pow(10.0, digits) - 1;
    g.decimals = 0;
  }
  try {
    ar::Generator check(g);  // option errors before any work
  } catch (const ablate::Error& e) {
    o.fail("", e.what());
  }
  g.format.answer_width =
      answer_width > 0 ? answer_width : std::max(g.format.width, ar::widest_answer(g));
  if (g.format.zero_pad && ar::widest_operand(g) > g.format.width)
    o.fail("width", "operands can have " + std::to_string(ar::widest_operand(g)) +
                        " characters, more than --width " + std::to_string(g.format.width) +
                        "; raise --width or lower --max");
  if (g.format.zero_pad && ar::widest_answer(g) > g.format.answer_width)
    o.fail("answer_width", "answers can have " + std::to_string(ar::widest_answer(g)) +
                               " characters, more than --answer-width " +
                               std::to_string(g.format.answer_width) + "; raise --answer-width");
  return f;
}

// Writes the files, reads them back to check them, prints what was written.
void write_split(const ablate::Options& o, const GenFlags& f, std::ostream& out) {
  std::unordered_set<std::string> exclude;
  for (const auto& file : f.exclude)
    for (auto& l : read_lines(file)) exclude.insert(std::move(l));
  ar::Split split = ar::generate_split(f.g, f.train.empty() ? 0 : f.train_count,
                                       f.test.empty() ? 0 : f.test_count, exclude);
  if (!f.train.empty()) write_lines(f.train, split.train);
  if (!f.test.empty()) write_lines(f.test, split.test);
  // Check what was written, not what was meant to be: read the files back.
  std::unordered_set<std::string> test_lines, train_lines;
  if (!f.test.empty())
    for (auto& l : read_lines(f.test)) test_lines.insert(std::move(l));
  if (!f.train.empty())
    for (auto& l : read_lines(f.train)) train_lines.insert(std::move(l));
  int64_t shared = 0, excluded = 0;
  for (const auto& l : train_lines) shared += test_lines.count(l), excluded += exclude.count(l);
  for (const auto& l : test_lines) excluded += exclude.count(l);
  if (shared || excluded)
    throw ablate::Error("the written files share " + std::to_string(shared) +
                        " problems between train and test and " + std::to_string(excluded) +
                        " with --exclude files (a bug: please report it)");
  (void)o;
  std::set<char> chars;
  size_t longest = 0;
  for (const auto* v : {&split.train, &split.test})
    for (const auto& l : *v) {
      chars.insert(l.begin(), l.end());
      longest = std::max(longest, l.size());
    }
  if (!f.train.empty())
    out << "wrote " << f.train << ": " << split.train.size() << " problems (" << train_lines.size()
        << " distinct)\n";
  if (!f.test.empty())
    out << "wrote " << f.test << ": " << split.test.size() << " problems (all distinct)\n";
  if (!f.train.empty() && !f.test.empty())
    out << "train and test share no problem (checked on the written files)\n";
  if (!f.exclude.empty()) out << "none of them is in " << ablate::join(f.exclude) << " (checked)\n";
  out << "characters: " << std::string(chars.begin(), chars.end()) << " (" << chars.size()
      << " plus newline); longest line " << longest << " characters, " << longest + 1
      << " with its newline (model.context >= " << longest << " for data.windows: lines)\n";
  const auto& shown = split.test.empty() ? split.train : split.test;
  for (int64_t i = 0; i < f.examples && i < static_cast<int64_t>(shown.size()); ++i)
    out << "  " << shown[static_cast<size_t>(i)] << "\n";
}

class Arithmetic final : public ablate::Task {
 public:
  Arithmetic(const ablate::Options&, const ablate::BuildContext&) {}

  std::unique_ptr<ablate::Evaluator> evaluator(const ablate::Options& o,
                                               const ablate::BuildContext&) override {
    return std::make_unique<ArithmeticEvaluator>(o);
  }

  void write_data(const ablate::Options& o, std::ostream& out) override {
    GenFlags f = read_generator_flags(o);
    if (o.describing()) return;
    write_split(o, f, out);
  }
};

}  // namespace
ABLATE_PLUGIN(ablate::Task, arithmetic, Arithmetic,
              "arithmetic problems (+ - * /, decimals, padding, reversed answers): data, exact "
              "match with breakdowns")
