// Shared command-line plumbing: the command table and option parsing with clear errors.
#include "commands.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "ablate/error.hpp"
#include "ablate/ops.hpp"
#include "ablate/registry.hpp"
#include "ablate/trainer.hpp"

namespace po = boost::program_options;

namespace ablate::cli {

std::map<std::string, Command>& commands() {
  static std::map<std::string, Command> c;
  return c;
}

const char* version() { return "0.1.0"; }

bool parse(const std::vector<std::string>& args, const std::string& usage_line,
           po::options_description& opts, const po::positional_options_description& pos,
           po::variables_map& vm) {
  opts.add_options()("help,h", "show this help");
  try {
    // Exact option names only: Boost would otherwise take a prefix (--step for --steps, or
    // --gen for --gen-tokens), so that a typo could silently set another option.
    const int style =
        po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    po::store(po::command_line_parser(args).options(opts).positional(pos).style(style).run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: " << usage_line << "\n\n" << opts << "\n";
      return false;
    }
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    std::vector<std::string> names;
    for (const auto& o : opts.options()) names.push_back("--" + o->long_name());
    std::string dym = did_you_mean(e.get_option_name(), names);
    throw UsageError(std::string(e.what()) + (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
  } catch (const po::error& e) {
    throw UsageError(e.what());
  }
  return true;
}

std::vector<std::string> comma_list(const std::string& option, const std::string& value) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = value.find(',', start);
    out.push_back(value.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (out.back().empty())
      throw UsageError(option + " '" + value + "': an empty name between commas");
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

void add_plugin_dirs(const po::variables_map& vm) {
  if (!vm.count("plugin-dir")) return;
  for (const auto& d : vm["plugin-dir"].as<std::vector<std::string>>())
    PluginRegistry::instance().add_directory(d);
}

void use_precision(const LoadedRun& run, const std::string& flag) {
  Precision p = run_precision(run);
  if (!flag.empty()) {
    try {
      p = parse_precision(flag, "--precision");
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }
  set_default_precision(p);
  if (p == Precision::bf16 && !bf16_notice().empty()) std::cerr << bf16_notice() << "\n";
}

Options flag_options(const std::vector<std::string>& args, const std::string& command) {
  auto src = std::make_shared<ConfigSource>();
  src->file = command;
  YAML::Node map(YAML::NodeType::Map);
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 3 || a.compare(0, 2, "--") != 0)
      throw UsageError("unexpected argument '" + a + "'; flags are written --name value (see " +
                       command + " --help)");
    std::string key = a.substr(2), value = "true", shown = a;
    if (const size_t eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key.resize(eq);
    } else if (i + 1 < args.size() && args[i + 1].compare(0, 2, "--") != 0) {
      value = args[++i];
      shown += " " + value;
    }
    std::replace(key.begin(), key.end(), '-', '_');
    src->overrides[key] = shown;
    if (!map[key]) {
      map[key] = value;
    } else {  // repeated: a list
      if (!map[key].IsSequence()) {
        YAML::Node first = YAML::Clone(map[key]);
        map[key] = YAML::Node(YAML::NodeType::Sequence);
        map[key].push_back(first);
      }
      map[key].push_back(value);
    }
  }
  return Options(map, src, "");
}

std::unique_ptr<tbb::global_control> thread_limit(const boost::program_options::variables_map& vm) {
  const int64_t threads = vm["threads"].as<int64_t>();
  if (threads < 0) throw UsageError("--threads must be >= 0, got " + std::to_string(threads));
  if (threads == 0) return nullptr;
  return std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism,
                                               static_cast<size_t>(threads));
}

void require_output_dir(const std::string& flag, const std::string& file) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::absolute(file).parent_path();
  if (!fs::is_directory(dir))
    throw UsageError(flag + " " + file + ": the directory " + dir.string() +
                     " does not exist; create it first (mkdir -p " + dir.string() + ")");
}

void write_output(const std::string& file, const std::string& text) {
  std::ofstream f(file, std::ios::binary);
  if (f) f << text;
  if (f) f.close();
  if (!f) throw Error(file + ": cannot write it: " + std::strerror(errno));
}

}  // namespace ablate::cli
