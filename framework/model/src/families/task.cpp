// Family "task": its descriptor (see ablate/family.hpp), conformance checks and the
// skeleton of `ablate plugin new task NAME`.
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <unordered_set>

#include "ablate/model.hpp"
#include "ablate/task.hpp"
#include "ablate/tokenizer.hpp"
#include "kit.hpp"

namespace ablate::conformance {
namespace {

// A directory removed with its files when the check ends.
struct ScratchDir {
  std::string path;
  ScratchDir() {
    std::string t = (std::filesystem::temp_directory_path() / "ablate_task_check_XXXXXX").string();
    if (!mkdtemp(t.data())) throw Error("cannot create a temporary directory under " + t);
    path = t;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string operator/(const std::string& f) const { return path + "/" + f; }
};

std::vector<std::string> file_lines(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  expect(static_cast<bool>(in), path + " was not written");
  std::vector<std::string> v;
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) v.push_back(l);
  return v;
}

Options flags(const ScratchDir& dir, const std::string& tag, int64_t seed) {
  YAML::Node n;
  n["train"] = dir / (tag + "_train.txt");
  n["test"] = dir / (tag + "_test.txt");
  n["train_count"] = 200;
  n["test_count"] = 20;
  n["seed"] = seed;
  return Options(n, std::make_shared<ConfigSource>(), "");
}

void check_task(Checker& ck, const Subject& s) {
  const ModelDims d = small_dims();
  ScratchDir dir;
  std::ostringstream printed;
  bool written = false;
  ck.run(
      "write_data: train and test files (train_count 200, test_count 20, seed); test distinct, "
      "none in train; "
      "the same seed writes the same files",
      [&](std::string& note) {
        auto t = build<Task>(s.options, "task", d);
        for (const auto& [tag, seed] :
             std::vector<std::pair<std::string, int64_t>>{{"a", 5}, {"b", 5}}) {
          const Options o = flags(dir, tag, seed);
          t->write_data(o, printed);
          o.check_unused();
        }
        const auto train = file_lines(dir / "a_train.txt"), test = file_lines(dir / "a_test.txt");
        expect(!train.empty() && !test.empty(), "an empty file: " + std::to_string(train.size()) +
                                                    " training and " + std::to_string(test.size()) +
                                                    " test lines");
        const std::unordered_set<std::string> tr(train.begin(), train.end()),
            te(test.begin(), test.end());
        expect(te.size() == test.size(), "the test file repeats a problem");
        for (const auto& l : test)
          expect(!tr.count(l), "test problem '" + l + "' is also in the training file");
        expect(train == file_lines(dir / "b_train.txt") && test == file_lines(dir / "b_test.txt"),
               "two calls with the same seed wrote different files");
        expect(!printed.str().empty(), "write_data printed nothing; say what was written");
        written = true;
        note = std::to_string(train.size()) + " training, " + std::to_string(test.size()) +
               " test lines";
      });
  ck.run("write_data documents its options (ablate data TASK --help)", [&](std::string& note) {
    auto t = build<Task>(s.options, "task", d);
    Options o = Options::describe("");
    std::ostringstream ignored;
    t->write_data(o, ignored);
    size_t standard = 0;
    for (const OptionDoc& doc : o.docs())
      for (const char* k : {"train", "test", "train_count", "test_count", "seed"})
        standard += doc.key == k ? 1 : 0;
    expect(standard == 5,
           "in describe mode write_data should read train, test, train_count, test_count and seed");
    note = std::to_string(o.docs().size()) + " options";
  });
  if (!written) return;
  ck.run(
      "evaluator on the test file: named metrics, the same on repeated calls (but *_per_s "
      "timings), a one-line summary",
      [&](std::string& note) {
        auto t = build<Task>(s.options, "task", d);
        std::string text;
        for (const auto& l : file_lines(dir / "a_train.txt")) text += l + "\n";
        YAML::Node tn;
        tn["type"] = family(Tokenizer::kFamily).default_variant;
        auto tok = build<Tokenizer>(tn, "tokenizer", d);
        tok->fit(text);
        Model model(
            options_from_yaml("{d_model: 16, n_heads: 2, n_layers: 1, context: 64}", "model"),
            tok->vocab_size(), 1);
        YAML::Node en = YAML::Clone(s.options);
        en["data"] = dir / "a_test.txt";
        Options eo(en, std::make_shared<ConfigSource>(), "eval.0");
        ParamStore none;
        std::unique_ptr<Evaluator> ev = t->evaluator(eo, BuildContext{d, ParamScope(none, ""), 1});
        eo.check_unused({"type"});
        expect(ev != nullptr, "evaluator() returned null");
        EvalContext ctx{model, *tok.obj, 10, true, 1, dir.path};
        const auto r1 = ev->evaluate(ctx), r2 = ev->evaluate(ctx);
        expect(!r1.empty(), "no metrics");
        expect(r1.size() == r2.size(), "the number of columns changes between calls");
        for (size_t i = 0; i < r1.size(); ++i) {
          expect(!r1[i].first.empty() && r1[i].first == r2[i].first,
                 "column " + std::to_string(i) + " has no name or changes name");
          const bool timing = r1[i].first.size() > 6 &&
                              r1[i].first.compare(r1[i].first.size() - 6, 6, "_per_s") == 0;
          const bool same = r1[i].second == r2[i].second ||
                            (std::isnan(r1[i].second) && std::isnan(r2[i].second));
          expect(same || timing,
                 "metric '" + r1[i].first +
                     "' differs between two identical calls (only timings, named *_per_s, may)");
        }
        expect_specs_fit(ev->metric_specs(), r1);
        const std::string line = ev->summary(r1);
        expect(!line.empty() && line.find('\n') == std::string::npos,
               "summary() should be one non-empty line, got '" + line + "'");
        note = std::to_string(r1.size()) + " metrics; untrained: " + line;
      });
}

const char* kTemplate =
    R"TPL(// @NAME@: a task for ablate (family "task"), from `ablate plugin new task @NAME@`.
// As generated: reverse a word, "$abc=cba$". `ablate data @NAME@ --train train.txt --test
// test.txt` writes the data; `eval: [{type: @NAME@, data: test.txt}]` scores a model during
// training, `ablate eval RUN --task @NAME@ --data test.txt` afterwards.
#include <algorithm>
#include <fstream>
#include <set>

#include "ablate/data_source.hpp"
#include "ablate/generate.hpp"
#include "ablate/plugin.hpp"
#include "ablate/task.hpp"

namespace {

class @CLASS@Evaluator final : public ablate::Evaluator {
 public:
  explicit @CLASS@Evaluator(const ablate::Options& o) {
    const std::string data = o.require<std::string>("data", "problem file written by 'ablate data @NAME@'");
    if (o.describing()) return;
    std::ifstream in(ablate::resolve_data_file(data, ""), std::ios::binary);
    for (std::string l; std::getline(in, l);)
      if (l.size() > 2 && l.find('=') != std::string::npos) lines_.push_back(l);
    if (lines_.empty()) o.fail("data", "no problems in '" + data + "'");
  }

  // Greedy continuation of every prompt "$abc=" until '$', all prompts decoded together
  // through the KV cache (decode_prompts); exact match of the answer.
  std::vector<std::pair<std::string, double>> evaluate(ablate::EvalContext& ctx) override {
    std::vector<std::string> prompts, answers;
    std::vector<int64_t> max_chars;
    for (const std::string& l : lines_) {
      const size_t eq = l.find('=');
      prompts.push_back(l.substr(0, eq + 1));
      answers.push_back(l.substr(eq + 1));  // ends with '$'
      max_chars.push_back(static_cast<int64_t>(answers.back().size()));
    }
    const auto out = ablate::decode_prompts(ctx.model, ctx.tokenizer, prompts, max_chars, ablate::DecodeOptions(), "$");
    int64_t exact = 0;
    for (size_t i = 0; i < out.size(); ++i) exact += out[i] == answers[i] ? 1 : 0;
    return {{"exact_match", static_cast<double>(exact) / static_cast<double>(lines_.size())}};
  }

  std::string summary(const std::vector<std::pair<std::string, double>>& row) const override {
    return "exact match " + std::to_string(row.at(0).second) + " on " + std::to_string(lines_.size()) + " words";
  }

 private:
  std::vector<std::string> lines_;
};

class @CLASS@ final : public ablate::Task {
 public:
  @CLASS@(const ablate::Options&, const ablate::BuildContext&) {}

  void write_data(const ablate::Options& o, std::ostream& out) override {
    const std::string train = o.get<std::string>("train", "", "training file to write");
    const std::string test = o.get<std::string>("test", "", "test file to write");
    const int64_t n_train = o.get_in<int64_t>("train_count", 2000, 0, 1 << 24, "training words");
    const int64_t n_test = o.get_in<int64_t>("test_count", 200, 0, 1 << 20, "test words (distinct, none in training)");
    const int64_t max_len = o.get_in<int64_t>("max_length", 5, 1, 20, "longest word");
    const uint64_t seed = static_cast<uint64_t>(o.get_in<int64_t>("seed", 1, 0, int64_t{1} << 62, "random seed"));
    if (o.describing()) return;
    ablate::Rng rng(seed);
    auto word = [&] {
      std::string w(1 + rng.below(static_cast<uint64_t>(max_len)), 'a');
      for (char& c : w) c = static_cast<char>('a' + rng.below(6));
      return w;
    };
    std::set<std::string> test_words;
    for (int64_t tries = 0; static_cast<int64_t>(test_words.size()) < n_test && tries < 100 * (n_test + 1); ++tries)
      test_words.insert(word());
    auto line = [](const std::string& w) { return "$" + w + "=" + std::string(w.rbegin(), w.rend()) + "$"; };
    std::ofstream tr(train), te(test);
    int64_t written = 0;
    for (int64_t tries = 0; written < n_train && tries < 100 * (n_train + 1); ++tries) {
      const std::string w = word();
      if (test_words.count(w)) continue;
      tr << line(w) << "\n";
      ++written;
    }
    for (const auto& w : test_words) te << line(w) << "\n";
    out << "wrote " << train << " (" << written << " words) and " << test << " (" << test_words.size() << " words)\n";
  }

  std::unique_ptr<ablate::Evaluator> evaluator(const ablate::Options& o, const ablate::BuildContext&) override {
    return std::make_unique<@CLASS@Evaluator>(o);
  }
};

}  // namespace
ABLATE_PLUGIN(ablate::Task, @NAME@, @CLASS@, "reverse a word")
)TPL";

std::vector<std::pair<std::string, std::vector<OptionDoc>>> task_options(void* variant) {
  Task& t = *static_cast<Task*>(variant);
  Options data = Options::describe("");
  std::ostringstream ignored;
  t.write_data(data, ignored);
  Options eval = Options::describe("eval.0");
  ParamStore none;
  try {
    t.evaluator(eval, BuildContext{ModelDims{}, ParamScope(none, ""), 0});
  } catch (const std::exception&) {
  }
  return {{"ablate data flags (--key-name value)", data.docs()},
          {"evaluator options (eval entry, ablate eval flags)", eval.docs()}};
}

[[maybe_unused]] const bool registered = register_family([] {
  FamilyDescriptor d;
  d.name = Task::kFamily;
  d.key = "eval";
  d.list = true;
  d.summary =
      "data of its own (ablate data TASK) and scoring (eval: [{type: TASK}], ablate eval --task "
      "TASK)";
  d.checks = &check_task;
  d.template_summary = "reverse a word";
  d.template_source = kTemplate;
  d.more_options = &task_options;
  return d;
}());

}  // namespace
}  // namespace ablate::conformance
