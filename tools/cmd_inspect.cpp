// ablate inspect RUN --text TEXT -o inspect.html: attention maps, next-token
// probabilities, embedding maps (PCA, t-SNE) and positional-encoding maps of a trained
// run as one self-contained HTML page, and the same numbers as HDF5 (inspect.h5 next to it).
#include <cmath>
#include <filesystem>
#include <iostream>

#include "ablate/error.hpp"
#include "ablate/inspect.hpp"
#include "ablate/svg.hpp"
#include "commands.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

using ablate::cli::UsageError;

// The inspection's options, checked as far as they can be without the run.
ablate::InspectOptions inspect_options(const po::variables_map& vm) {
  ablate::InspectOptions o;
  o.text = vm["text"].as<std::string>();
  o.top = vm["top"].as<int64_t>();
  o.perplexity = vm["perplexity"].as<double>();
  o.tsne_iterations = vm["tsne-iterations"].as<int>();
  o.map_tokens = vm["map-tokens"].as<int64_t>();
  o.positions = vm["positions"].as<int64_t>();
  const int64_t seed = vm["seed"].as<int64_t>();
  if (o.text.empty())
    throw UsageError("--text is empty; give at least one character, e.g. --text \"ROMEO:\"");
  if (o.top < 1) throw UsageError("--top must be >= 1, got " + std::to_string(o.top));
  if (seed < 0) throw UsageError("--seed must be >= 0, got " + std::to_string(seed));
  o.seed = static_cast<uint64_t>(seed);
  if (o.tsne_iterations < 1)
    throw UsageError("--tsne-iterations must be >= 1, got " + std::to_string(o.tsne_iterations));
  if (o.map_tokens < 4)
    throw UsageError("--map-tokens must be >= 4, got " + std::to_string(o.map_tokens));
  if (o.positions < 0)
    throw UsageError("--positions must be >= 0 (0: min(context, 64)), got " +
                     std::to_string(o.positions));
  // Negated, so that NaN is refused too; the upper bound needs the vocabulary (below).
  if (!(o.perplexity == 0 || o.perplexity >= 1))
    throw UsageError("--perplexity must be >= 1 (or 0: automatic), got " +
                     std::to_string(o.perplexity));
  return o;
}

// Checks `o` against the run's vocabulary and context; an automatic perplexity is chosen.
void fit_options_to_run(ablate::InspectOptions& o, const ablate::LoadedRun& run) {
  const int64_t mapped = std::min(run.tokenizer->vocab_size(), o.map_tokens);
  const double max_perp = ablate::tsne_max_perplexity(mapped);
  if (o.perplexity == 0) o.perplexity = std::max(1.0, std::min(30.0, max_perp));
  if (o.perplexity > max_perp)
    throw UsageError("--perplexity " + ablate::svg::format_number(o.perplexity) +
                     " is too large for the " + std::to_string(mapped) +
                     " mapped tokens: t-SNE allows at most (N - 1) / 3 = " +
                     ablate::svg::format_number(max_perp) + "; choose e.g. --perplexity " +
                     ablate::svg::format_number(std::max(1.0, std::floor(max_perp / 2))));
  const int64_t context = run.model->dims().context;
  if (o.positions > context)
    throw UsageError("--positions " + std::to_string(o.positions) +
                     " exceeds the model's context of " + std::to_string(context) +
                     "; choose at most " + std::to_string(context));
}

// Inspects the run; the text's problems name the --text flag.
ablate::Inspection inspect_naming_text(ablate::LoadedRun& run, const ablate::InspectOptions& o) {
  try {
    return ablate::inspect_run(run, o);
  } catch (const ablate::ConfigError&) {
    throw;
  } catch (const ablate::Error& e) {
    const std::string what = e.what();
    // The text's problems name the flag; the rest keep their own context.
    if (what.rfind("the text", 0) == 0) throw UsageError("--text: " + what);
    throw;
  }
}

int cmd_inspect(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()("run", po::value<std::string>(), "run directory (or its checkpoint file)")(
      "text", po::value<std::string>(),
      "input text: at most model.context tokens, characters the tokenizer knows")(
      "output,o", po::value<std::string>()->default_value("inspect.html"), "HTML page to write")(
      "h5", po::value<std::string>(),
      "HDF5 file for the numbers (default: the page's name with .h5)")(
      "top", po::value<int64_t>()->default_value(20), "bars in the next-token chart")(
      "perplexity", po::value<double>()->default_value(0.0),
      "t-SNE perplexity, in [1, (N - 1) / 3] for N mapped tokens (0: min(30, (N - 1) / 3))")(
      "seed", po::value<int64_t>()->default_value(1), "t-SNE seed (>= 0)")(
      "tsne-iterations", po::value<int>()->default_value(1000), "t-SNE gradient steps")(
      "map-tokens", po::value<int64_t>()->default_value(500),
      "tokens drawn in the maps and given to t-SNE; larger vocabularies are subsampled (the text's "
      "tokens, then evenly spaced ids)")("positions", po::value<int64_t>()->default_value(0),
                                         "positions in the positional maps (0: min(context, 64))")(
      "precision", po::value<std::string>(),
      "inputs of the matrix products and attention: float32 or bf16 (default: the run's "
      "train.precision)")("plugin-dir", po::value<std::vector<std::string>>()->composing(),
                          "extra plugin directory (repeatable)");
  po::positional_options_description pos;
  pos.add("run", 1);
  po::variables_map vm;
  if (!ablate::cli::parse(args,
                          "ablate inspect RUN --text TEXT [-o inspect.html] [--h5 FILE] [options]",
                          opts, pos, vm))
    return 0;
  if (!vm.count("run")) throw UsageError("missing the run directory (e.g. runs/quickstart)");
  if (!vm.count("text"))
    throw UsageError(
        "missing --text TEXT: the input whose attention to show (e.g. --text \"ROMEO: But soft\")");
  ablate::cli::add_plugin_dirs(vm);
  ablate::InspectOptions o = inspect_options(vm);
  const std::string html_path = vm["output"].as<std::string>();
  const std::string h5_path = vm.count("h5")
                                  ? vm["h5"].as<std::string>()
                                  : fs::path(html_path).replace_extension(".h5").string();
  if (fs::absolute(h5_path) == fs::absolute(html_path))
    throw UsageError("--h5 " + h5_path +
                     " is the HTML page itself; give another file name, e.g. --h5 inspect.h5");
  // Both files or neither: check their directories before any work.
  ablate::cli::require_output_dir("-o", html_path);
  ablate::cli::require_output_dir("--h5", h5_path);

  auto run = ablate::load_run(vm["run"].as<std::string>());
  ablate::cli::use_precision(run, vm.count("precision") ? vm["precision"].as<std::string>() : "");
  fit_options_to_run(o, run);
  const ablate::Inspection in = inspect_naming_text(run, o);
  ablate::cli::write_output(html_path,
                            ablate::render_inspection(in, fs::path(h5_path).filename().string()));
  ablate::write_inspection_h5(in, h5_path);
  std::cout << "run " << in.run_dir << " (step " << in.step << "), " << in.time << " tokens, "
            << in.n_layers << " layers x " << in.n_heads << " heads, " << in.precision << "\nwrote "
            << html_path << " and " << h5_path << "\n";
  for (const auto& n : in.notes) std::cout << "note: " << n << "\n";
  return 0;
}

}  // namespace

ABLATE_COMMAND("inspect",
               "attention maps, next-token probabilities, embedding and positional maps of a run: "
               "'ablate inspect RUN --text TEXT -o inspect.html'",
               cmd_inspect);
