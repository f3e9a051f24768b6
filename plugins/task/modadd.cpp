// Modular addition, the task of grokking (Power et al. 2022): "$a+b=c$" with c = (a + b) mod p
// for every pair a, b in [0, p); a random fraction of the p^2 pairs trains, the rest tests.
//   ablate data modadd --train train.txt --test test.txt --p 97 --train-fraction 0.5
//   eval: [{type: modadd, data: test.txt}]           (exact match during training)
//   ablate eval RUN --task modadd --data test.txt
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "ablate/data_source.hpp"
#include "ablate/error.hpp"
#include "ablate/generate.hpp"  // decode_prompts: batched KV-cache continuation of prompts
#include "ablate/plugin.hpp"
#include "ablate/task.hpp"

namespace {

struct Line {
  std::string prompt, answer;  // "$3+5=" and "1" (p = 7)
};

std::vector<Line> read_lines(const std::string& path, int64_t max) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ablate::Error(path + ": cannot read");
  std::vector<Line> v;
  int64_t n = 0;
  for (std::string l; std::getline(in, l);) {
    ++n;
    if (l.empty()) continue;
    const size_t eq = l.find('=');
    if (l.size() < 4 || l.front() != '$' || l.back() != '$' || eq == std::string::npos)
      throw ablate::Error(path + ":" + std::to_string(n) + ": '" + l +
                          "' is not a problem line like $3+5=1$");
    v.push_back({l.substr(0, eq + 1), l.substr(eq + 1, l.size() - eq - 2)});
    if (max > 0 && static_cast<int64_t>(v.size()) >= max) break;
  }
  if (v.empty()) throw ablate::Error(path + ": no problems");
  return v;
}

void write_file(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw ablate::Error(path + ": cannot write");
  for (const auto& l : lines) out << l << '\n';
  if (!out) throw ablate::Error(path + ": write failed (disk full?)");
}

class ModAddEvaluator final : public ablate::Evaluator {
 public:
  explicit ModAddEvaluator(const ablate::Options& o) {
    const std::string data = o.require<std::string>(
        "data", "problem file written by 'ablate data modadd' (path or data-directory name)");
    problems_ = o.get_in<int64_t>("problems", 0, 0, int64_t{1} << 40,
                                  "problems scored (the file's first N; 0: all)");
    decode_.batch = o.get_in<int64_t>("batch", 256, 1, 1 << 20, "sequences decoded together");
    if (o.describing()) return;
    const std::string& file = o.source()->file;
    const std::string yaml_dir = std::filesystem::is_regular_file(file)
                                     ? std::filesystem::absolute(file).parent_path().string()
                                     : "";
    try {
      lines_ = read_lines(ablate::resolve_data_file(data, yaml_dir), problems_);
    } catch (const ablate::ConfigError&) {
      throw;
    } catch (const ablate::Error& e) {
      o.fail("data", std::string(e.what()) +
                         ". Write it first: 'ablate data modadd --train train.txt --test " + data +
                         "'");
    }
  }

  std::vector<std::pair<std::string, double>> evaluate(ablate::EvalContext& ctx) override {
    std::vector<std::string> prompts;
    std::vector<int64_t> max_chars;
    for (const Line& l : lines_) {
      prompts.push_back(l.prompt);
      max_chars.push_back(static_cast<int64_t>(l.answer.size()) + 1);
    }
    ablate::DecodeOptions d = decode_;
    d.seed = ctx.seed;
    const auto out = ablate::decode_prompts(ctx.model, ctx.tokenizer, prompts, max_chars, d, "$");
    int64_t exact = 0;
    for (size_t i = 0; i < lines_.size(); ++i) exact += out[i] == lines_[i].answer + "$" ? 1 : 0;
    return {{"exact_match", static_cast<double>(exact) / static_cast<double>(lines_.size())},
            {"problems", static_cast<double>(lines_.size())}};
  }
  std::vector<ablate::MetricSpec> metric_specs() const override {
    return {{"exact_match", ablate::Better::higher, 0, 1},
            {"problems", ablate::Better::neither, 0}};
  }

  std::string summary(const std::vector<std::pair<std::string, double>>& row) const override {
    char buf[96];
    std::snprintf(buf, sizeof buf, "exact match %.4f on %.0f problems", row.at(0).second,
                  row.at(1).second);
    return buf;
  }

 private:
  int64_t problems_ = 0;
  ablate::DecodeOptions decode_;
  std::vector<Line> lines_;
};

class ModAdd final : public ablate::Task {
 public:
  ModAdd(const ablate::Options&, const ablate::BuildContext&) {}

  void write_data(const ablate::Options& o, std::ostream& out) override {
    const int64_t p =
        o.get_in<int64_t>("p", 97, 2, 1000, "the modulus; problems are every pair a, b in [0, p)");
    const double frac =
        o.get_in<double>("train_fraction", 0.5, 0.0, 1.0, "share of the p^2 pairs that train");
    const int64_t train_count = o.get_in<int64_t>("train_count", -1, -1, int64_t{1} << 40,
                                                  "training pairs (-1: train_fraction of p^2)");
    const int64_t test_count = o.get_in<int64_t>("test_count", -1, -1, int64_t{1} << 40,
                                                 "test pairs (-1: all the others)");
    const uint64_t seed = static_cast<uint64_t>(
        o.get_in<int64_t>("seed", 1, 0, int64_t{1} << 62, "which pairs train"));
    const std::string train = o.get<std::string>("train", "", "training problem file to write");
    const std::string test = o.get<std::string>("test", "", "test problem file to write");
    if (o.describing()) return;
    if (train.empty() && test.empty()) o.fail("train", "give --train FILE and/or --test FILE");
    const int64_t pairs = p * p;
    const int64_t n_train =
        train_count >= 0 ? train_count
                         : static_cast<int64_t>(std::floor(frac * static_cast<double>(pairs)));
    const int64_t n_test = test_count >= 0 ? test_count : pairs - n_train;
    if (n_train + n_test > pairs)
      o.fail(train_count >= 0 ? "train_count" : "test_count",
             std::to_string(n_train) + " training and " + std::to_string(n_test) +
                 " test pairs, but p = " + std::to_string(p) + " has only " +
                 std::to_string(pairs) + " pairs; lower the counts or raise --p");
    // A seeded shuffle of all pairs: the first n_train train, the next n_test test.
    std::vector<int64_t> order(static_cast<size_t>(pairs));
    std::iota(order.begin(), order.end(), int64_t{0});
    ablate::Rng rng(seed);
    for (int64_t i = pairs - 1; i > 0; --i)
      std::swap(order[static_cast<size_t>(i)],
                order[static_cast<size_t>(rng.below(static_cast<uint64_t>(i + 1)))]);
    auto line = [p](int64_t k) {
      const int64_t a = k / p, b = k % p;
      return "$" + std::to_string(a) + "+" + std::to_string(b) + "=" + std::to_string((a + b) % p) +
             "$";
    };
    std::vector<std::string> tr, te;
    for (int64_t i = 0; i < n_train; ++i) tr.push_back(line(order[static_cast<size_t>(i)]));
    for (int64_t i = n_train; i < n_train + n_test; ++i)
      te.push_back(line(order[static_cast<size_t>(i)]));
    if (!train.empty()) write_file(train, tr);
    if (!test.empty()) write_file(test, te);
    if (!train.empty()) out << "wrote " << train << ": " << tr.size() << " problems\n";
    if (!test.empty())
      out << "wrote " << test << ": " << te.size() << " problems, none in the training file\n";
    out << "p = " << p << ": " << pairs << " pairs; e.g. " << line(order[0]) << "\n";
  }

  std::unique_ptr<ablate::Evaluator> evaluator(const ablate::Options& o,
                                               const ablate::BuildContext&) override {
    return std::make_unique<ModAddEvaluator>(o);
  }
};

}  // namespace
ABLATE_PLUGIN(ablate::Task, modadd, ModAdd,
              "modular addition a + b mod p over all pairs, the grokking task (Power et al. 2022)")
