// ablate data train-tokenizer --vocab-size N --out tokenizer.json INPUT...: learns a byte-level
// BPE as GPT-2's on a corpus and writes it as a Hugging Face tokenizer.json, which
// `tokenizer: {type: gpt2, tokenizer_json: FILE}` loads (ablate/bpe_train.hpp, docs/DATA.md).
// `ablate data` hands it the arguments after `train-tokenizer` (cmd_data.cpp).

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>

#include "ablate/bpe_train.hpp"
#include "ablate/error.hpp"
#include "commands.hpp"

namespace po = boost::program_options;

namespace {

// What train-tokenizer learns and where it writes it, checked.
struct TrainTokenizerSettings {
  int64_t vocab = 0, min_frequency = 2;
  std::string out;
  bool quiet = false;
};

TrainTokenizerSettings train_settings(const po::variables_map& vm) {
  if (!vm.count("input"))
    throw ablate::cli::UsageError("missing the input: text or JSONL files, a directory or a glob");
  if (!vm.count("vocab-size"))
    throw ablate::cli::UsageError(
        "missing --vocab-size N (the 256 bytes + merges + <|endoftext|>; GPT-2: 50257)");
  if (!vm.count("out")) throw ablate::cli::UsageError("missing --out tokenizer.json");
  TrainTokenizerSettings s;
  s.vocab = vm["vocab-size"].as<int64_t>();
  if (s.vocab < 257 || s.vocab > (int64_t{1} << 24))
    throw ablate::cli::UsageError("--vocab-size " + std::to_string(s.vocab) +
                                  ": allowed 257 (the 256 bytes and <|endoftext|>) to 16777216");
  s.min_frequency = vm["min-frequency"].as<int64_t>();
  if (s.min_frequency < 1)
    throw ablate::cli::UsageError("--min-frequency must be >= 1, got " +
                                  std::to_string(s.min_frequency));
  s.out = vm["out"].as<std::string>();
  s.quiet = vm["quiet"].as<bool>();
  return s;
}

// Writes `text` to `out` through a temporary file renamed into place.
void write_replacing(const std::string& out, const std::string& text) {
  const std::string tmp = out + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary);
    if (!f) throw ablate::Error(out + ": cannot write: " + std::strerror(errno));
    f << text;
    if (!f.flush()) throw ablate::Error(out + ": error while writing");
  }
  std::error_code ec;
  std::filesystem::rename(tmp, out, ec);
  if (ec) throw ablate::Error(out + ": cannot rename " + tmp + " into place: " + ec.message());
}

void print_summary(const TrainTokenizerSettings& s, const ablate::CorpusCount& counted,
                   const ablate::ByteBpe& bpe, double merge_s) {
  const double mb = static_cast<double>(counted.bytes) / 1e6;
  std::fprintf(stderr,
               "%strain-tokenizer: %.2f MB of text (%lld file%s) counted in %.1f s (%.1f MB/s): "
               "%zu distinct words, %llu in all\n",
               s.quiet ? "" : "\r", mb, static_cast<long long>(counted.files),
               counted.files == 1 ? "" : "s", counted.seconds,
               counted.seconds > 0 ? mb / counted.seconds : 0.0, counted.words.size(),
               static_cast<unsigned long long>(counted.pieces));
  std::fprintf(stderr,
               "train-tokenizer: %zu merges in %.1f s; vocabulary %zu (256 bytes, %zu merges, "
               "<|endoftext|> = %d) -> %s\n",
               bpe.merges.size(), merge_s, bpe.tokens.size(), bpe.merges.size(),
               bpe.first_special(), s.out.c_str());
  if (static_cast<int64_t>(bpe.tokens.size()) < s.vocab)
    std::fprintf(stderr,
                 "train-tokenizer: no pair occurs --min-frequency %lld times any more: the "
                 "vocabulary is %zu, not %lld\n",
                 static_cast<long long>(s.min_frequency), bpe.tokens.size(),
                 static_cast<long long>(s.vocab));
}

}  // namespace

int cmd_data_train_tokenizer(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()("input", po::value<std::vector<std::string>>()->composing(),
                     "text or JSONL files, directories or globs (.gz and .zst read as they are)")(
      "vocab-size", po::value<int64_t>(),
      "tokens in the vocabulary: the 256 bytes, the merges and <|endoftext|> (GPT-2: 50257)")(
      "out,o", po::value<std::string>(), "the tokenizer.json to write")(
      "min-frequency", po::value<int64_t>()->default_value(2),
      "stop early when the most frequent pair occurs fewer times than this")(
      "field", po::value<std::string>()->default_value("text"),
      "JSONL (.jsonl, .ndjson): the field holding a document's text")(
      "threads", po::value<int64_t>()->default_value(0), "counting threads (0: every core)")(
      "overwrite", po::bool_switch(), "replace --out if it exists")("quiet,q", po::bool_switch(),
                                                                    "no progress");
  po::positional_options_description pos;
  pos.add("input", -1);
  po::variables_map vm;
  if (!ablate::cli::parse(
          args,
          "ablate data train-tokenizer --vocab-size N --out tokenizer.json [options] INPUT...",
          opts, pos, vm))
    return 0;
  const TrainTokenizerSettings s = train_settings(vm);
  const std::unique_ptr<tbb::global_control> parallelism = ablate::cli::thread_limit(vm);
  std::error_code ec;
  if (std::filesystem::is_directory(s.out, ec))
    throw ablate::Error(s.out + ": is a directory; --out names the tokenizer.json to write");
  if (std::filesystem::exists(s.out, ec) && !vm["overwrite"].as<bool>())
    throw ablate::Error(s.out + ": exists; give --overwrite to replace it, or another --out");

  ablate::BpeCorpusOptions o;
  o.inputs = vm["input"].as<std::vector<std::string>>();
  o.field = vm["field"].as<std::string>();
  o.quiet = s.quiet;
  const ablate::CorpusCount counted = ablate::count_corpus_words(o);
  if (counted.words.empty())
    throw ablate::Error("train-tokenizer: the input holds no text to learn from");
  const auto t0 = std::chrono::steady_clock::now();
  const ablate::ByteBpe bpe =
      ablate::learn_byte_bpe(counted.words, s.vocab, o.specials,
                             static_cast<uint64_t>(s.min_frequency), [&](size_t merges) {
                               if (s.quiet) return;
                               std::fprintf(stderr, "\rtrain-tokenizer: %zu merges", merges);
                               std::fflush(stderr);
                             });
  const double merge_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_replacing(s.out, ablate::hf_tokenizer_json(bpe));
  print_summary(s, counted, bpe, merge_s);
  return 0;
}
