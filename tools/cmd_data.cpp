// ablate data arithmetic: writes arithmetic problem files (train and test in one call, checked
// disjoint) in the format of REFERENCE.md; rules and examples in docs/ARITHMETIC.md.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <unordered_set>

#include "ablate/arithmetic.hpp"
#include "ablate/error.hpp"
#include "commands.hpp"

namespace po = boost::program_options;
namespace ar = ablate::arithmetic;

namespace {

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

int data_arithmetic(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()
    ("task", po::value<std::string>(), "data set to write: arithmetic")
    ("train", po::value<std::string>(), "training problem file to write")
    ("test", po::value<std::string>(), "test problem file to write (distinct problems, none in the training file)")
    ("train-count", po::value<int64_t>()->default_value(100000), "training problems (may repeat, as random sampling does)")
    ("test-count", po::value<int64_t>()->default_value(10000), "test problems")
    ("ops", po::value<std::string>()->default_value("+-*/"), "operations, drawn uniformly (e.g. + or +-*/)")
    ("digits", po::value<int>(), "integer operands of up to N digits: --min 0 --max 10^N-1 --decimals 0")
    ("min", po::value<double>(), "smallest operand (default 0.01: with --max 1000 the original's (0, 1000])")
    ("max", po::value<double>(), "largest operand (default 1000)")
    ("decimals", po::value<int>(), "decimal places of operands drawn with decimals (default 2; 0: integers only)")
    ("decimal-fraction", po::value<double>()->default_value(0.5), "probability that an operand has decimals")
    ("answer-decimals", po::value<int>()->default_value(2), "results rounded to this many places (half away from zero)")
    ("reversed", po::value<bool>()->default_value(true, "true"), "answer written least-significant character first (true/false)")
    ("zero-pad", po::value<bool>()->default_value(true, "true"), "zero-pad operands and answer to fixed widths (true/false)")
    ("width", po::value<int>()->default_value(10), "operand width with zero padding")
    ("answer-width", po::value<int>(), "answer width with zero padding (default: the larger of --width and the widest possible answer)")
    ("exclude", po::value<std::vector<std::string>>()->composing(), "problem file whose lines neither output may contain (repeatable)")
    ("seed", po::value<uint64_t>()->default_value(1), "random seed")
    ("examples", po::value<int>()->default_value(3), "example lines to print");
  po::positional_options_description pos;
  pos.add("task", 1);
  po::variables_map vm;
  if (!ablate::cli::parse(args,
                          "ablate data arithmetic --train train.txt --test test.txt [--train-count N] [--test-count M] [options]\n"
                          "  e.g. reversed 3-digit addition: --ops + --digits 3 --width 3\n"
                          "  the original mixed setup (REFERENCE.md): the defaults",
                          opts, pos, vm))
    return 0;
  if (!vm.count("task")) throw ablate::cli::UsageError("missing the data set; available: arithmetic");
  if (vm["task"].as<std::string>() != "arithmetic")
    throw ablate::cli::UsageError("unknown data set '" + vm["task"].as<std::string>() + "'; available: arithmetic");
  if (!vm.count("train") && !vm.count("test")) throw ablate::cli::UsageError("give --train FILE and/or --test FILE");
  ar::GeneratorOptions g;
  g.ops = vm["ops"].as<std::string>();
  if (vm.count("digits")) {
    if (vm.count("min") || vm.count("max")) throw ablate::cli::UsageError("--digits sets --min and --max; give one or the other");
    int d = vm["digits"].as<int>();
    if (d < 1 || d > 12) throw ablate::cli::UsageError("--digits must be in 1..12, got " + std::to_string(d));
    if (vm.count("decimals") && vm["decimals"].as<int>() != 0)
      throw ablate::cli::UsageError("--digits means integer operands; drop --decimals or use --min/--max");
    g.min = 0;
    g.max = std::pow(10.0, d) - 1;
    g.decimals = 0;
  } else {
    if (vm.count("min")) g.min = vm["min"].as<double>();
    if (vm.count("max")) g.max = vm["max"].as<double>();
    if (vm.count("decimals")) g.decimals = vm["decimals"].as<int>();
  }
  g.decimal_fraction = vm["decimal-fraction"].as<double>();
  g.answer_decimals = vm["answer-decimals"].as<int>();
  g.format.reversed = vm["reversed"].as<bool>();
  g.format.zero_pad = vm["zero-pad"].as<bool>();
  g.format.width = vm["width"].as<int>();
  g.seed = vm["seed"].as<uint64_t>();
  ar::Generator check(g);  // option errors before any work
  (void)check;
  g.format.answer_width = vm.count("answer-width") ? vm["answer-width"].as<int>() : std::max(g.format.width, ar::widest_answer(g));
  if (g.format.zero_pad && ar::widest_operand(g) > g.format.width)
    throw ablate::Error("operands can have " + std::to_string(ar::widest_operand(g)) + " characters, more than --width " +
                        std::to_string(g.format.width) + "; raise --width or lower --max");
  if (g.format.zero_pad && ar::widest_answer(g) > g.format.answer_width)
    throw ablate::Error("answers can have " + std::to_string(ar::widest_answer(g)) + " characters, more than --answer-width " +
                        std::to_string(g.format.answer_width) + "; raise --answer-width");

  std::unordered_set<std::string> exclude;
  std::vector<std::string> exclude_files;
  if (vm.count("exclude")) exclude_files = vm["exclude"].as<std::vector<std::string>>();
  for (const auto& f : exclude_files)
    for (auto& l : read_lines(f)) exclude.insert(std::move(l));
  int64_t n_train = vm.count("train") ? vm["train-count"].as<int64_t>() : 0;
  int64_t n_test = vm.count("test") ? vm["test-count"].as<int64_t>() : 0;
  if (n_train < 0 || n_test < 0) throw ablate::cli::UsageError("counts must be >= 0");
  ar::Split split = ar::generate_split(g, n_train, n_test, exclude);
  if (vm.count("train")) write_lines(vm["train"].as<std::string>(), split.train);
  if (vm.count("test")) write_lines(vm["test"].as<std::string>(), split.test);

  // Check what was written, not what was meant to be: read the files back.
  std::unordered_set<std::string> test_lines, train_lines;
  if (vm.count("test")) for (auto& l : read_lines(vm["test"].as<std::string>())) test_lines.insert(std::move(l));
  if (vm.count("train")) for (auto& l : read_lines(vm["train"].as<std::string>())) train_lines.insert(std::move(l));
  int64_t shared = 0, excluded = 0;
  for (const auto& l : train_lines) shared += test_lines.count(l), excluded += exclude.count(l);
  for (const auto& l : test_lines) excluded += exclude.count(l);
  if (shared || excluded)
    throw ablate::Error("the written files share " + std::to_string(shared) + " problems between train and test and " +
                        std::to_string(excluded) + " with --exclude files (a bug: please report it)");

  std::set<char> chars;
  size_t longest = 0;
  for (const auto* v : {&split.train, &split.test})
    for (const auto& l : *v) {
      chars.insert(l.begin(), l.end());
      longest = std::max(longest, l.size());
    }
  if (vm.count("train"))
    std::cout << "wrote " << vm["train"].as<std::string>() << ": " << split.train.size() << " problems (" << train_lines.size()
              << " distinct)\n";
  if (vm.count("test"))
    std::cout << "wrote " << vm["test"].as<std::string>() << ": " << split.test.size() << " problems (all distinct)\n";
  if (vm.count("train") && vm.count("test")) std::cout << "train and test share no problem (checked on the written files)\n";
  if (!exclude_files.empty()) std::cout << "none of them is in " << ablate::join(exclude_files) << " (checked)\n";
  std::cout << "characters: " << std::string(chars.begin(), chars.end()) << " (" << chars.size()
            << " plus newline); longest line " << longest << " characters, " << longest + 1
            << " with its newline (model.context >= " << longest << " for data.windows: lines)\n";
  const auto& shown = split.test.empty() ? split.train : split.test;
  for (int i = 0; i < vm["examples"].as<int>() && i < static_cast<int>(shown.size()); ++i) std::cout << "  " << shown[static_cast<size_t>(i)] << "\n";
  return 0;
}

int cmd_data(const std::vector<std::string>& args) { return data_arithmetic(args); }

}  // namespace

ABLATE_COMMAND("data", "write task data sets: 'ablate data arithmetic --train train.txt --test test.txt ...'", cmd_data);
