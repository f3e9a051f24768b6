// The conformance suite of family "task": the data it writes and its evaluator.
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <unordered_set>

#include "ablate/model.hpp"
#include "ablate/task.hpp"
#include "ablate/tokenizer.hpp"
#include "kit.hpp"
#include "suites.hpp"

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

// What the task checks share: the variant and a scratch directory for the files it writes.
struct TaskCase {
  const Subject& s;
  const ModelDims d = small_dims();
  ScratchDir dir;
  bool written = false;  // the first check wrote a_train.txt and a_test.txt

  explicit TaskCase(const Subject& subject) : s(subject) {}
  Built<Task> task() const { return build<Task>(s.options, "task", d); }
};

void writes_distinct_test_problems(TaskCase& c, std::string& note) {
  auto t = c.task();
  std::ostringstream printed;
  for (const auto& [tag, seed] : std::vector<std::pair<std::string, int64_t>>{{"a", 5}, {"b", 5}}) {
    const Options o = flags(c.dir, tag, seed);
    t->write_data(o, printed);
    o.check_unused();
  }
  const auto train = file_lines(c.dir / "a_train.txt"), test = file_lines(c.dir / "a_test.txt");
  expect(!train.empty() && !test.empty(), "an empty file: " + std::to_string(train.size()) +
                                              " training and " + std::to_string(test.size()) +
                                              " test lines");
  const std::unordered_set<std::string> tr(train.begin(), train.end()),
      te(test.begin(), test.end());
  expect(te.size() == test.size(), "the test file repeats a problem");
  for (const auto& l : test)
    expect(!tr.count(l), "test problem '" + l + "' is also in the training file");
  expect(train == file_lines(c.dir / "b_train.txt") && test == file_lines(c.dir / "b_test.txt"),
         "two calls with the same seed wrote different files");
  expect(!printed.str().empty(), "write_data printed nothing; say what was written");
  c.written = true;
  note = std::to_string(train.size()) + " training, " + std::to_string(test.size()) + " test lines";
}

void documents_its_options(TaskCase& c, std::string& note) {
  auto t = c.task();
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
}

// Two rows of metrics have the same columns and the same values, but for timings (*_per_s).
void expect_same_metrics(const std::vector<std::pair<std::string, double>>& r1,
                         const std::vector<std::pair<std::string, double>>& r2) {
  expect(!r1.empty(), "no metrics");
  expect(r1.size() == r2.size(), "the number of columns changes between calls");
  for (size_t i = 0; i < r1.size(); ++i) {
    expect(!r1[i].first.empty() && r1[i].first == r2[i].first,
           "column " + std::to_string(i) + " has no name or changes name");
    const bool timing =
        r1[i].first.size() > 6 && r1[i].first.compare(r1[i].first.size() - 6, 6, "_per_s") == 0;
    const bool same =
        r1[i].second == r2[i].second || (std::isnan(r1[i].second) && std::isnan(r2[i].second));
    expect(same || timing,
           "metric '" + r1[i].first +
               "' differs between two identical calls (only timings, named *_per_s, may)");
  }
}

void evaluator_scores_the_test_file(TaskCase& c, std::string& note) {
  auto t = c.task();
  std::string text;
  for (const auto& l : file_lines(c.dir / "a_train.txt")) text += l + "\n";
  YAML::Node tn;
  tn["type"] = family(Tokenizer::kFamily).default_variant;
  auto tok = build<Tokenizer>(tn, "tokenizer", c.d);
  tok->fit(text);
  Model model(options_from_yaml("{d_model: 16, n_heads: 2, n_layers: 1, context: 64}", "model"),
              tok->vocab_size(), 1);
  YAML::Node en = YAML::Clone(c.s.options);
  en["data"] = c.dir / "a_test.txt";
  Options eo(en, std::make_shared<ConfigSource>(), "eval.0");
  ParamStore none;
  std::unique_ptr<Evaluator> ev = t->evaluator(eo, BuildContext{c.d, ParamScope(none, ""), 1});
  eo.check_unused({"type"});
  expect(ev != nullptr, "evaluator() returned null");
  EvalContext ctx{model, *tok.obj, 10, true, 1, c.dir.path};
  const auto r1 = ev->evaluate(ctx), r2 = ev->evaluate(ctx);
  expect_same_metrics(r1, r2);
  expect_specs_fit(ev->metric_specs(), r1);
  const std::string line = ev->summary(r1);
  expect(!line.empty() && line.find('\n') == std::string::npos,
         "summary() should be one non-empty line, got '" + line + "'");
  note = std::to_string(r1.size()) + " metrics; untrained: " + line;
}

}  // namespace

void check_task(Checker& ck, const Subject& s) {
  TaskCase c(s);
  run_properties<TaskCase>(
      ck, c,
      {{"write_data: train and test files (train_count 200, test_count 20, seed); test distinct, "
        "none in train; the same seed writes the same files",
        &writes_distinct_test_problems},
       {"write_data documents its options (ablate data TASK --help)", &documents_its_options}});
  if (!c.written) return;
  run_properties<TaskCase>(
      ck, c,
      {{"evaluator on the test file: named metrics, the same on repeated calls (but *_per_s "
        "timings), a one-line summary",
        &evaluator_scores_the_test_file}});
}

}  // namespace ablate::conformance
