// Family "task": its descriptor (see ablate/family.hpp) and the skeleton of
// `ablate plugin new task NAME`; its conformance checks are in conformance/task.cpp.
#include <sstream>

#include "ablate/registry.hpp"
#include "ablate/task.hpp"

#include "../conformance/suites.hpp"

namespace ablate {
namespace {

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
  try {
    t.evaluator(eval, StandaloneContext());
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
  d.checks = &conformance::check_task;
  d.template_summary = "reverse a word";
  d.template_source = kTemplate;
  d.more_options = &task_options;
  return d;
}());

}  // namespace
}  // namespace ablate
