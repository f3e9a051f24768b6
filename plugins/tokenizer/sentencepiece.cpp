// SentencePiece (Kudo and Richardson 2018) through Debian's libsentencepiece: a model loaded
// from a .model file (`model: FILE`, on the data search path), or trained on the experiment's
// training text by fit() (`train: {vocab_size: N, model_type: unigram|bpe, ...}`), with ids
// identical to python3-sentencepiece's `encode(text)` for the same model (no BOS or EOS
// added). The state is the serialized model proto, so a run encodes and generates with no file.
//
// Training: the text goes to SentencePieceTrainer from memory as "sentences": runs of whole
// lines, at most max_sentence_length bytes each (a longer line is cut at UTF-8 character
// boundaries), without the newline at the end of a run, so that the newlines inside a run are
// characters the model learns. The defaults differ from spm_train's where spm_train's lose text:
// identity normalization (no NFKC), add_dummy_prefix false, remove_extra_whitespaces false,
// byte_fallback true (an unseen character is its UTF-8 bytes), allow_whitespace_only_pieces true,
// and hard_vocab_limit false (vocab_size is a ceiling: a small text gives fewer pieces); then
// decode(encode(text)) == text for any valid UTF-8. Any other key of `train` is passed to the
// trainer as spm_train's flag of that name (e.g. split_digits, user_defined_symbols, pad_id).
// Deterministic: the random seed is fixed (train.random_seed, default 0; SentencePiece draws
// from it when input_sentence_size samples sentences) and so is num_threads (default 16:
// unigram's EM sums per-thread partial counts in thread order, so the same num_threads gives
// the same model on any machine).
//
// Text that is not UTF-8: SentencePiece's normalizer replaces each invalid byte with U+FFFD,
// so such bytes decode as U+FFFD (three bytes EF BF BD), not as themselves.
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include "ablate/data_source.hpp"
#include "ablate/error.hpp"
#include "ablate/plugin.hpp"
#include "ablate/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;
using Processor = sentencepiece::SentencePieceProcessor;

constexpr const char* kStateMagic = "ablate-sentencepiece-tokenizer";

// The training text as SentencePiece's sentences (see the comment at the top).
class Sentences final : public sentencepiece::SentenceIterator {
 public:
  Sentences(const std::string& text, size_t max_bytes) : text_(text), max_(max_bytes) { Next(); }
  bool done() const override { return done_; }
  void Next() override {
    if (pos_ >= text_.size()) {
      done_ = true;
      return;
    }
    size_t end = pos_;
    while (end < text_.size()) {  // whole lines while they fit
      size_t nl = text_.find('\n', end);
      nl = nl == std::string::npos ? text_.size() : nl + 1;
      if (nl - pos_ > max_) break;
      end = nl;
    }
    if (end == pos_) {  // a line longer than max_: its first max_ bytes, cut between characters
      end = pos_ + max_;
      while (end > pos_ + 1 && (static_cast<unsigned char>(text_[end]) & 0xC0) == 0x80) --end;
    }
    // Without the newline characters at its end, as spm_train's file reader and Python's
    // sentence iterator give sentences (so Python trains the same model from the same text).
    size_t last = end;
    while (last > pos_ && (text_[last - 1] == '\n' || text_[last - 1] == '\r')) --last;
    value_.assign(text_, pos_, last - pos_);
    pos_ = end;
  }
  const std::string& value() const override { return value_; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::string& text_;
  size_t max_, pos_ = 0;
  std::string value_;
  bool done_ = false;
};

// A processor loaded from a serialized model; `what` names the source for errors.
std::shared_ptr<const Processor> processor_of(const std::string& proto, const std::string& what,
                                              const std::string& fix) {
  if (proto.empty())
    throw ablate::Error(what + ": the file is empty, not a SentencePiece model. " + fix);
  auto sp = std::make_shared<Processor>();
  const sentencepiece::util::Status st = sp->LoadFromSerializedProto(proto);
  if (!st.ok()) {
    const size_t first = proto.find_first_not_of(" \t\r\n");
    std::string kind;
    if (first != std::string::npos && proto[first] == '{')
      kind =
          " (it is JSON: a Hugging Face tokenizer.json? a byte-level BPE one loads with "
          "`tokenizer: {type: gpt2, tokenizer_json: FILE}`)";
    else if (proto.find('\t') != std::string::npos && proto.find('\0') == std::string::npos)
      kind = " (it is text: a SentencePiece .vocab file? give the .model file written beside it)";
    throw ablate::Error(what + ": not a SentencePiece model" + kind +
                        "; SentencePiece says: " + st.ToString() + ". " + fix);
  }
  return sp;
}

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ablate::Error(what + ": cannot open " + path + ": " + std::strerror(errno));
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw ablate::Error(what + ": error while reading " + path);
  return s;
}

std::string scalar_text(const YAML::Node& n) {
  if (n.IsScalar()) return n.Scalar();
  std::string s;  // a list: SentencePiece's comma-separated form of a repeated field
  for (const YAML::Node& x : n)
    s += (s.empty() ? "" : ",") + (x.IsScalar() ? x.Scalar() : std::string());
  return s;
}

class SentencePiece final : public ablate::Tokenizer {
 public:
  SentencePiece(const ablate::Options& o, const ablate::BuildContext&)
      : model_(o.get<std::string>("model", "",
                                  "a SentencePiece .model file, looked for on the data search "
                                  "path; none: train one on the training text")) {
    const ablate::Options t = o.child("train");
    args_["vocab_size"] = std::to_string(t.get_in<int64_t>(
        "vocab_size", 8000, 4, int64_t{1} << 24,
        "train: pieces at most, control and byte pieces included (SentencePiece's default 8000)"));
    args_["model_type"] = t.get_choice("model_type", "unigram", {"unigram", "bpe", "word", "char"},
                                       "train: the segmentation model");
    args_["character_coverage"] = std::to_string(t.get_in<double>(
        "character_coverage", 0.9995, 0.98, 1.0,
        "train: share of the text's characters that get pieces of their own (the rest: bytes)"));
    args_["num_threads"] = std::to_string(t.get_in<int64_t>(
        "num_threads", 16, 1, 128, "train: trainer threads (part of the result: fixed)"));
    args_["max_sentence_length"] = std::to_string(
        t.get_in<int64_t>("max_sentence_length", 4192, 16, int64_t{1} << 30,
                          "train: bytes per sentence given to the trainer (runs of whole lines)"));
    seed_ = static_cast<unsigned>(
        t.get_in<int64_t>("random_seed", 0, 0, 4294967294, "train: SentencePiece's random seed"));
    args_["minloglevel"] = std::to_string(t.get_in<int64_t>(
        "minloglevel", 1, 0, 3, "train: SentencePiece's log level (0 info, 1 warnings)"));
    const std::pair<const char*, bool> flags[] = {{"byte_fallback", true},
                                                  {"add_dummy_prefix", false},
                                                  {"remove_extra_whitespaces", false},
                                                  {"allow_whitespace_only_pieces", true},
                                                  {"hard_vocab_limit", false},
                                                  {"split_digits", false}};
    for (const auto& [key, def] : flags)
      args_[key] = t.get<bool>(key, def, "train: as spm_train's flag") ? "true" : "false";
    args_["normalization_rule_name"] =
        t.get<std::string>("normalization_rule_name", "identity",
                           "train: identity, nmt_nfkc, nfkc, nmt_nfkc_cf or nfkc_cf");
    if (o.describing()) return;
    // Other keys: spm_train's flags, checked by the trainer when fit() runs.
    for (const auto& kv : t.node()) {
      if (!t.node().IsMap()) break;
      const std::string key = kv.first.as<std::string>();
      if (args_.count(key) || key == "random_seed") continue;
      if (key == "input" || key == "model_prefix" || key == "input_format")
        t.fail(key,
               "the trainer reads the experiment's training text; `" + key + "` does not apply");
      if (!kv.second.IsScalar() && !kv.second.IsSequence())
        t.fail(key, "expected a value or a list");
      t.mark_used(key);
      args_[key] = scalar_text(kv.second);
      extra_[key] = t.where(key) + ": " + t.key_path(key);
    }
    train_where_ = t.where() + ": " + t.path();
    if (!model_.empty() && o.has("train"))
      o.fail("train", "give either `model` (a ready-made model) or `train`, not both");
    if (o.has("model") && model_.empty()) o.fail("model", "an empty file name");
    model_where_ = o.where("model") + ": " + o.key_path("model");
    const std::string& file = o.source()->file;
    std::error_code ec;
    if (fs::is_regular_file(file, ec)) yaml_dir_ = fs::absolute(file).parent_path().string();
  }

  // Trains a model on `text`, or (with `model`) reads the file now so that a missing or
  // malformed one is reported before the data are encoded.
  void fit(const std::string& text) override {
    if (!model_.empty()) {
      processor();
      return;
    }
    if (text.empty())
      throw ablate::Error(train_where_ + ": no training text to train a SentencePiece model on");
    std::string proto;
    {
      // The seed and the log level are the library's globals: one training at a time.
      static std::mutex mu;
      std::lock_guard<std::mutex> lock(mu);
      sentencepiece::SetRandomGeneratorSeed(seed_);
      Sentences sentences(text, std::stoull(args_.at("max_sentence_length")));
      const sentencepiece::util::Status st =
          sentencepiece::SentencePieceTrainer::Train(args_, &sentences, &proto);
      if (!st.ok()) {
        std::string msg = train_where_ + ": SentencePiece's trainer failed: " + st.ToString();
        for (const auto& [key, where] : extra_)
          if (msg.find(key) != std::string::npos)
            msg += "\n" + where + " is passed to the trainer as spm_train's --" + key;
        msg +=
            "\n(`train` takes vocab_size, model_type and spm_train's other flags. vocab_size "
            "counts the control pieces, "
            "one piece per character of the text's character_coverage and, with byte_fallback (the "
            "default), 256 byte "
            "pieces; a vocabulary larger than the text allows needs a smaller vocab_size or "
            "hard_vocab_limit: false)";
        throw ablate::Error(msg);
      }
    }
    set(processor_of(proto, train_where_ + " (the trained model)", ""), proto);
  }

  std::vector<int32_t> encode(const std::string& text) const override {
    const auto sp = processor();
    std::vector<int> ids;
    const sentencepiece::util::Status st = sp->Encode(text, &ids);
    if (!st.ok()) throw ablate::Error("sentencepiece tokenizer: encode failed: " + st.ToString());
    return std::vector<int32_t>(ids.begin(), ids.end());
  }

  // Ids outside the vocabulary decode as the unknown piece (SentencePiece's " \u2047 ").
  std::string decode(const std::vector<int32_t>& ids) const override {
    const auto sp = processor();
    const int n = sp->GetPieceSize();
    std::vector<int> in(ids.size());
    for (size_t i = 0; i < ids.size(); ++i)
      in[i] = ids[i] >= 0 && ids[i] < n ? ids[i] : sp->unk_id();
    std::string out;
    const sentencepiece::util::Status st = sp->Decode(in, &out);
    if (!st.ok()) throw ablate::Error("sentencepiece tokenizer: decode failed: " + st.ToString());
    return out;
  }

  int64_t vocab_size() const override { return processor()->GetPieceSize(); }
  int32_t pad_id() const override { return processor()->pad_id(); }
  int32_t eot_id() const override { return processor()->eos_id(); }
  bool pretrained() const override { return !model_.empty(); }

  std::string save() const override {
    processor();
    std::lock_guard<std::mutex> lock(mu_);
    return std::string(kStateMagic) + " 1\nmodel " + std::to_string(proto_.size()) + "\n" + proto_;
  }

  void load(const std::string& state) override {
    auto bad = [](const std::string& what) {
      return ablate::Error("sentencepiece tokenizer state: " + what);
    };
    const std::string head = std::string(kStateMagic) + " 1\nmodel ";
    if (state.compare(0, head.size(), head) != 0) {
      if (state.rfind(kStateMagic, 0) == 0) throw bad("unknown version, expected 1");
      throw bad("not a sentencepiece tokenizer state");
    }
    const size_t nl = state.find('\n', head.size());
    const std::string count =
        nl == std::string::npos ? "" : state.substr(head.size(), nl - head.size());
    if (count.empty() || count.size() > 12 ||
        count.find_first_not_of("0123456789") != std::string::npos)
      throw bad("missing or bad model size");
    const std::string proto = state.substr(nl + 1);
    if (proto.size() != std::stoull(count))
      throw bad("the model is " + std::to_string(proto.size()) + " bytes, the header says " +
                count + " (truncated?)");
    set(processor_of(proto, "sentencepiece tokenizer state", ""), proto);
  }

 private:
  void set(std::shared_ptr<const Processor> sp, const std::string& proto) {
    std::lock_guard<std::mutex> lock(mu_);
    sp_ = std::move(sp);
    proto_ = proto;
  }

  std::shared_ptr<const Processor> processor() const {
    std::lock_guard<std::mutex> lock(mu_);
    if (sp_) return sp_;
    if (model_.empty())
      throw ablate::Error(
          "sentencepiece tokenizer: used before fit() trained it or load() restored it");
    std::string path;
    try {
      path = ablate::resolve_data_file(model_, yaml_dir_);
    } catch (const ablate::Error& e) {
      throw ablate::Error(model_where_ + ": " + e.what());
    }
    const std::string fix =
        "`model` names a SentencePiece model file (.model, written by spm_train or "
        "SentencePieceTrainer)";
    proto_ = read_file(path, model_where_);
    sp_ = processor_of(proto_, model_where_ + ": " + path, fix);
    return sp_;
  }

  std::string model_, model_where_, train_where_, yaml_dir_;
  std::unordered_map<std::string, std::string> args_;  // the trainer's flags
  std::map<std::string, std::string> extra_;  // flags passed through -> where they were set
  unsigned seed_ = 0;
  mutable std::mutex mu_;
  mutable std::shared_ptr<const Processor> sp_;  // trained, loaded, or read on first use
  mutable std::string proto_;                    // its serialized model
};

}  // namespace
ABLATE_PLUGIN(ablate::Tokenizer, sentencepiece, SentencePiece,
              "SentencePiece (unigram or BPE) through libsentencepiece: a .model file, or trained "
              "on the training text")
