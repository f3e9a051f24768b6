// Exact-match evaluation on arithmetic problems (REFERENCE.md "Arithmetic task"): prompts
// through '=', batched KV-cache decoding until '$', character accuracy and exact match,
// with breakdowns by operation, answer length, carries and answer position.
//   eval: [{type: arithmetic, data: test.txt, problems: 1000, batch: 256, greedy: true}]
#include <filesystem>

#include "ablate/arithmetic.hpp"
#include "ablate/data_source.hpp"
#include "ablate/error.hpp"
#include "ablate/evaluator.hpp"
#include "ablate/plugin.hpp"

namespace {

namespace ar = ablate::arithmetic;

class Arithmetic final : public ablate::Evaluator {
 public:
  Arithmetic(const ablate::Options& o, const ablate::BuildContext&) {
    data_ = o.require<std::string>("data", "problem file written by 'ablate data arithmetic' (path or data-directory name)");
    problems_ = o.get_in<int64_t>("problems", 1000, 0, int64_t{1} << 40, "problems scored at each evaluation (the file's first N; 0: all)");
    final_problems_ = o.get_in<int64_t>("final_problems", -1, -1, int64_t{1} << 40,
                                        "problems scored at the end of training (-1: as problems; 0: all)");
    final_only_ = o.get<bool>("final_only", false, "score only at the end of training (the other evaluations report NaN)");
    decode_.batch = o.get_in<int64_t>("batch", 256, 1, 1 << 20, "sequences decoded together");
    decode_.sampling.greedy = o.get<bool>("greedy", true, "argmax decoding; false: sample with temperature and top_k");
    decode_.sampling.temperature = o.get_in<float>("temperature", 1.0f, 0.0f, 100.0f, "softmax temperature when sampling");
    decode_.sampling.top_k = o.get_in<int64_t>("top_k", 0, 0, 1 << 24, "sample among the k most likely tokens (0: all)");
    breakdowns_ = o.get<bool>("breakdowns", true, "also log exact match by operation, answer length, carries and position");
    if (o.describing()) return;
    // Relative names resolve next to the experiment file first (as data.path does).
    std::string yaml_dir;
    const std::string& file = o.source()->file;
    if (std::filesystem::is_regular_file(file)) yaml_dir = std::filesystem::absolute(file).parent_path().string();
    try {
      path_ = ablate::resolve_data_file(data_, yaml_dir);
      all_ = ar::read_problems(path_);
    } catch (const ablate::ConfigError&) {
      throw;
    } catch (const ablate::Error& e) {
      o.fail("data", std::string(e.what()) + ". Generate the file first, e.g. 'ablate data arithmetic --train train.txt --test " +
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
    std::vector<ar::ParsedProblem> subset(all_.begin(), all_.begin() + static_cast<std::ptrdiff_t>(count));
    ar::DecodeOptions d = decode_;
    d.seed = ctx.seed;
    return ar::evaluate(ctx.model, ctx.tokenizer, subset, d).row(layout_, breakdowns_);
  }

 private:
  std::string data_, path_;
  int64_t problems_ = 1000, final_problems_ = -1;
  bool final_only_ = false, breakdowns_ = true;
  ar::DecodeOptions decode_;
  std::vector<ar::ParsedProblem> all_;
  ar::Layout layout_;
};

}  // namespace
ABLATE_PLUGIN(ablate::Evaluator, arithmetic, Arithmetic,
              "exact match and character accuracy on arithmetic problems (batched KV-cache decoding)")
