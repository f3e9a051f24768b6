// ablate data prepare INPUT... --out DIR --tokenizer NAME [--option K=V ...]: a text corpus
// into token shards (ablate/prepare.hpp, docs/DATA.md); `ablate data` hands it the arguments
// after `prepare` (cmd_data.cpp).

#include <iostream>
#include <memory>

#include "ablate/error.hpp"
#include "ablate/prepare.hpp"
#include "ablate/registry.hpp"
#include "commands.hpp"

namespace po = boost::program_options;

namespace {

// --split's value with the escapes \n, \t, \r and \\ turned into their characters.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 == s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    if (c == 'n') out += '\n';
    else if (c == 't') out += '\t';
    else if (c == 'r') out += '\r';
    else if (c == '\\') out += '\\';
    else
      throw ablate::cli::UsageError("--split '" + s + "': unknown escape '\\" + std::string(1, c) +
                                    "' (known: \\n \\t \\r \\\\)");
  }
  return out;
}

po::options_description prepare_options() {
  po::options_description opts("options");
  opts.add_options()("input", po::value<std::vector<std::string>>()->composing(),
                     "text or JSONL files, directories or globs (.gz and .zst read as they are)")(
      "out,o", po::value<std::string>(),
      "output directory (the shards, manifest.json, tokenizer.state)")(
      "tokenizer", po::value<std::string>(),
      "tokenizer plugin (ablate plugins tokenizer); one that is fitted on text fits on --fit-bytes "
      "of the training documents")(
      "option", po::value<std::vector<std::string>>()->composing(),
      "tokenizer option KEY=VALUE (repeatable), e.g. --option eot=true")(
      "field", po::value<std::string>()->default_value("text"),
      "JSONL (.jsonl, .ndjson): the field holding a document's text")(
      "split", po::value<std::string>()->default_value(""),
      "text files: cut into documents at this text (escapes \\n \\t), e.g. '\\n\\n' or "
      "'<|endoftext|>'; default: a file is one document")(
      "val", po::value<std::string>(),
      "validation documents from this file (or directory, glob) instead of --val-fraction")(
      "val-fraction", po::value<double>()->default_value(0.005),
      "share of the documents held out for validation: the first, then one in every 1/f")(
      "shard-tokens", po::value<int64_t>()->default_value(100000000),
      "tokens per shard (llm.c: 100M)")("name", po::value<std::string>(),
                                        "shard name prefix (default: the output directory's name): "
                                        "NAME_val_000000.bin, NAME_train_000001.bin, ...")(
      "fit-bytes", po::value<int64_t>()->default_value(int64_t{64} << 20),
      "a tokenizer fitted on text fits on this many bytes of the training documents")(
      "threads", po::value<int64_t>()->default_value(0), "encoding threads (0: every core)")(
      "overwrite", po::bool_switch(),
      "replace the shards, manifest and tokenizer state already in --out")(
      "quiet,q", po::bool_switch(), "no progress line");
  return opts;
}

// The inputs, outputs and sizes of the shards, checked.
ablate::PrepareOptions shard_options(const po::variables_map& vm) {
  ablate::PrepareOptions o;
  o.inputs = vm["input"].as<std::vector<std::string>>();
  o.out_dir = vm["out"].as<std::string>();
  o.field = vm["field"].as<std::string>();
  o.separator = unescape(vm["split"].as<std::string>());
  if (vm.count("val")) {
    if (!vm["val-fraction"].defaulted())
      throw ablate::cli::UsageError("give --val FILE or --val-fraction F, not both");
    o.val_file = vm["val"].as<std::string>();
  }
  o.val_fraction = vm["val-fraction"].as<double>();
  if (!(o.val_fraction > 0 && o.val_fraction <= 0.5))
    throw ablate::cli::UsageError("--val-fraction must be above 0 and at most 0.5, got " +
                                  std::to_string(o.val_fraction));
  o.shard_tokens = vm["shard-tokens"].as<int64_t>();
  if (o.shard_tokens < 1)
    throw ablate::cli::UsageError("--shard-tokens must be >= 1, got " +
                                  std::to_string(o.shard_tokens));
  o.fit_bytes = vm["fit-bytes"].as<int64_t>();
  if (o.fit_bytes < 1)
    throw ablate::cli::UsageError("--fit-bytes must be >= 1, got " + std::to_string(o.fit_bytes));
  if (vm.count("name")) o.name = vm["name"].as<std::string>();
  o.overwrite = vm["overwrite"].as<bool>();
  o.quiet = vm["quiet"].as<bool>();
  return o;
}

// The tokenizer, from the registry, with its --option KEY=VALUE as a YAML map would give
// them; `options` gets the (key, value) pairs given.
std::unique_ptr<ablate::Tokenizer> create_tokenizer(
    const po::variables_map& vm, std::vector<std::pair<std::string, std::string>>& options) {
  YAML::Node tn(YAML::NodeType::Map);
  tn["type"] = vm["tokenizer"].as<std::string>();
  auto src = std::make_shared<ablate::ConfigSource>();
  src->file = "ablate data prepare";
  if (vm.count("option"))
    for (const std::string& kv : vm["option"].as<std::vector<std::string>>()) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || eq == 0)
        throw ablate::cli::UsageError("--option '" + kv +
                                      "': expected KEY=VALUE, e.g. --option eot=true");
      const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
      if (key == "type")
        throw ablate::cli::UsageError(
            "--option type=...: give the tokenizer with --tokenizer NAME");
      tn[key] = value;
      src->overrides["tokenizer." + key] = "--option " + kv;
      options.emplace_back(key, value);
    }
  return ablate::PluginRegistry::instance().create<ablate::Tokenizer>(
      ablate::Options(tn, src, "tokenizer"), ablate::StandaloneContext());
}

}  // namespace

int cmd_data_prepare(const std::vector<std::string>& args) {
  po::options_description opts = prepare_options();
  po::positional_options_description pos;
  pos.add("input", -1);
  po::variables_map vm;
  if (!ablate::cli::parse(
          args,
          "ablate data prepare INPUT... --out DIR --tokenizer NAME [--option K=V ...] [options]",
          opts, pos, vm))
    return 0;
  if (!vm.count("input"))
    throw ablate::cli::UsageError("missing the input: text or JSONL files, a directory or a glob");
  if (!vm.count("out"))
    throw ablate::cli::UsageError("missing --out DIR, the directory the shards go to");
  std::vector<std::string> tokenizers;
  for (const ablate::PluginEntry* e :
       ablate::PluginRegistry::instance().variants(ablate::Tokenizer::kFamily))
    tokenizers.push_back(e->info->name);
  if (!vm.count("tokenizer"))
    throw ablate::cli::UsageError("missing --tokenizer NAME; available: " +
                                  ablate::join(tokenizers));
  const ablate::PrepareOptions o = shard_options(vm);
  const std::unique_ptr<tbb::global_control> parallelism = ablate::cli::thread_limit(vm);
  std::vector<std::pair<std::string, std::string>> options;
  const std::unique_ptr<ablate::Tokenizer> tok = create_tokenizer(vm, options);
  const ablate::PrepareSummary s =
      ablate::prepare_shards(o, *tok, vm["tokenizer"].as<std::string>(), options);
  std::cerr << "prepare: " << s.documents[0] << " training documents (" << s.tokens[0]
            << " tokens, " << s.bytes[0] << " bytes) and " << s.documents[1]
            << " validation documents (" << s.tokens[1] << " tokens, " << s.bytes[1]
            << " bytes) in " << s.shards << " shards, " << ablate::hms(s.seconds) << " -> "
            << s.manifest << "\n";
  return 0;
}
