// ablate data tokenize --tokenizer NAME [--option key=value ...] [--count] FILE|-: prints the
// token ids of a text (one line, space-separated) under any tokenizer. A tokenizer that is
// fitted on text (char, bpe) is fitted on the same text; --from RUN uses a run's saved one.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>

#include "ablate/error.hpp"
#include "ablate/registry.hpp"
#include "ablate/tokenizer.hpp"
#include "ablate/trainer.hpp"
#include "commands.hpp"

namespace po = boost::program_options;

namespace {

// The text of `file`, or of standard input for "-".
std::string read_text(const std::string& file) {
  std::string text;
  if (file == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    return text;
  }
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec))
    throw ablate::Error(file + ": is a directory; give a text file (or - for standard input)");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ablate::Error(file + ": cannot open the text file: " + std::strerror(errno));
  if (std::filesystem::is_regular_file(file, ec)) {  // read at once; a pipe or device is streamed
    text.resize(static_cast<size_t>(std::filesystem::file_size(file, ec)));
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<size_t>(in.gcount()));
  } else {
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (in.bad()) throw ablate::Error(file + ": error while reading the text file");
  return text;
}

// The --tokenizer variant with its --option key=value, fitted on `text` unless it comes
// ready-made.
std::unique_ptr<ablate::Tokenizer> create_tokenizer(const po::variables_map& vm,
                                                    const std::string& text) {
  auto& reg = ablate::PluginRegistry::instance();
  const std::string name = vm["tokenizer"].as<std::string>();
  if (!reg.find(ablate::Tokenizer::kFamily, name)) {
    std::vector<std::string> names;
    for (const ablate::PluginEntry* e : reg.variants(ablate::Tokenizer::kFamily))
      names.push_back(e->info->name);
    const std::string dym = ablate::did_you_mean(name, names);
    throw ablate::cli::UsageError("unknown tokenizer '" + name +
                                  "'. Available: " + ablate::join(names) +
                                  (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
  }
  YAML::Node node;
  node["type"] = name;
  auto source = std::make_shared<ablate::ConfigSource>();
  source->file = "ablate data tokenize";
  if (vm.count("option"))
    for (const std::string& kv : vm["option"].as<std::vector<std::string>>()) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0)
        throw ablate::cli::UsageError("--option " + kv +
                                      ": expected key=value (e.g. --option merges=1000)");
      const std::string key = kv.substr(0, eq);
      if (key == "type")
        throw ablate::cli::UsageError("--option type=...: the variant is --tokenizer");
      node[key] = YAML::Node(kv.substr(eq + 1));
      source->overrides["tokenizer." + key] = "--option " + kv;
    }
  std::unique_ptr<ablate::Tokenizer> tok = reg.create<ablate::Tokenizer>(
      ablate::Options(node, source, "tokenizer"), ablate::StandaloneContext());
  if (!tok->pretrained()) tok->fit(text);
  return tok;
}

// The ids on one line, space-separated.
void print_ids(const std::vector<int32_t>& ids) {
  std::string out;
  out.reserve(ids.size() * 6 + 1);
  char buf[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    const int n = std::snprintf(buf, sizeof buf, i ? " %d" : "%d", ids[i]);
    out.append(buf, static_cast<size_t>(n));
  }
  out += "\n";
  std::cout << out << std::flush;
}

}  // namespace

// ablate data tokenize: a tokenizer built from --tokenizer and --option (fitted on the text
// itself unless it comes ready-made), or the saved one of a run (--from), on a file or stdin.
int cmd_data_tokenize(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()("file", po::value<std::string>(), "the text file, or - for standard input")(
      "tokenizer", po::value<std::string>(),
      "tokenizer variant (char, byte, bpe, gpt2, ...: 'ablate plugins')")(
      "option", po::value<std::vector<std::string>>()->composing(),
      "a tokenizer option key=value (repeatable), as in YAML")(
      "from", po::value<std::string>(),
      "use the saved tokenizer of this run (directory or checkpoint file)")(
      "count", po::bool_switch(), "print only the number of tokens")(
      "plugin-dir", po::value<std::vector<std::string>>()->composing(),
      "extra plugin directory (repeatable)");
  po::positional_options_description pos;
  pos.add("file", 1);
  po::variables_map vm;
  if (!ablate::cli::parse(args,
                          "ablate data tokenize (--tokenizer NAME [--option key=value ...] | "
                          "--from RUN) [--count] FILE|-",
                          opts, pos, vm))
    return 0;
  if (!vm.count("file"))
    throw ablate::cli::UsageError("missing the text file (or - for standard input)");
  const bool from_run = vm.count("from") > 0;
  if (from_run == (vm.count("tokenizer") > 0))
    throw ablate::cli::UsageError(
        from_run ? "give --tokenizer or --from, not both (a run's tokenizer has its own options)"
                 : "missing --tokenizer NAME (e.g. gpt2, char, bpe) or --from RUN");
  if (from_run && vm.count("option"))
    throw ablate::cli::UsageError(
        "--option sets a --tokenizer's options; a run's (--from) are saved with it");
  ablate::cli::add_plugin_dirs(vm);

  const std::string text = read_text(vm["file"].as<std::string>());
  std::unique_ptr<ablate::Tokenizer> tok;
  ablate::LoadedRun run;
  if (from_run) {
    run = ablate::load_run(vm["from"].as<std::string>());
    tok = std::move(run.tokenizer);
  } else {
    tok = create_tokenizer(vm, text);
  }
  const std::vector<int32_t> ids = tok->encode(text);
  if (vm["count"].as<bool>()) std::cout << ids.size() << "\n";
  else print_ids(ids);
  return 0;
}
