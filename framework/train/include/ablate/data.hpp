// Training data: a text file split by position into train and validation, tokenized,
// and sampled as windows X = t[i:i+T], Y = t[i+1:i+T+1] (REFERENCE.md). `windows: random`
// starts a window anywhere (the seeds' concatenated stream); `windows: lines` starts every
// window at a line start (whole problems, e.g. arithmetic) and either packs the following
// lines behind it (`fill: pack`) or keeps only whole lines and pads (`fill: pad`). Padding
// targets are -1, which cross_entropy leaves out; with causal attention the padded inputs
// after the real tokens cannot affect them. `score_after: "="` (line windows) scores only
// the tokens after that text in each line, e.g. the answer of a problem: the prompt's
// targets are -1 too (a completion-only loss, as TRL's response template).
// `line_weights` (line windows) draws the training lines that match a pattern more or less
// often, over all steps or a range of them: a curriculum, or a mixture that leaves some
// kind of line out (weight 0).
// Token shards instead of a text file (`shards: DIR`, or `train: GLOB` and `val: GLOB`;
// docs/DATA.md): the files are memory-mapped, nothing is fitted or encoded, and a window
// lies inside one shard (a shard is drawn in proportion to the windows it holds, then an
// offset); `align: documents` starts every window at an end-of-text id.
// A named public dataset (`dataset: enwik8`; datasets.hpp, docs/DATA.md) brings its own files
// and split: text for a tokenizer fitted on text, token shards for a ready-made one.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ablate/options.hpp"
#include "ablate/shards.hpp"
#include "ablate/tensor.hpp"
#include "ablate/tokenizer.hpp"

namespace ablate {

// data.line_weights: rules {match: REGEX, weight: W, from: STEP, until: STEP}. A training
// line's weight at a step is the product of the weights of the rules that match it and whose
// steps [from, until] hold the step (1 with none); a window's first line is drawn in
// proportion to it. Lines are grouped by the set of rules they match, so a draw is one
// random number whatever the file's size.
struct LineWeights {
  struct Rule {
    std::string match;
    double weight = 1;
    int64_t from = 1, until = -1;  // steps, inclusive; until -1: to the end
    bool active(int64_t step) const { return step >= from && (until < 0 || step <= until); }
  };
  std::vector<Rule> rules;
  std::vector<std::vector<int64_t>>
      groups;  // training line indices by the mask of rules they match
  bool active(int64_t step) const;
  // Fills w (one entry per group) with a line's weight at `step`; returns the groups' total mass.
  double group_weights(int64_t step, double* w) const;
};

// The token shards of one split, mapped.
struct ShardSplit {
  std::vector<Shard> shards;
  // align: documents: each shard's end-of-text offsets, where windows start; else empty.
  std::vector<std::vector<int64_t>> starts;
  int64_t tokens = 0;
};

struct TextData {
  std::string path;    // the resolved file (shards: the directory, or the two patterns)
  std::string sha256;  // of the whole file (hex), recorded in the run file; shards: of their
                       // names, sizes and first and last 64 KiB (a fingerprint, not the whole)
  std::string train_text, val_text;
  std::vector<int32_t> train, val;  // token ids
  bool line_windows = false;        // windows: lines
  bool pad_lines = false;           // fill: pad (else pack)
  int32_t pad_input = 0;            // input id of padded positions (the tokenizer's pad_id, else 0)
  std::vector<int64_t> train_lines, val_lines;  // token offsets of line starts (line windows)
  int32_t score_after = -1;  // score_after's token id, or -1: every target scored
  LineWeights line_weights;  // line_weights (line windows)
  // Token shards (data.shards, data.train/val): train, val and the texts are then empty.
  std::shared_ptr<const ShardSplit> train_shards, val_shards;
  bool from_shards() const { return train_shards != nullptr; }
  // Tokens of the training (train = true) or validation part.
  int64_t tokens(bool train) const;
};

// Reads the `data:` section (path, train_fraction, windows, fill, score_after, line_weights), finds
// and reads the file, fits the tokenizer on the training part and encodes both parts. `context` is
// checked against the length of each part (random windows) or of the longest line (line
// windows: with windows: lines the split falls on a line boundary and each line is
// encoded on its own).
// fit = false: the tokenizer is used as it is (its state loaded from a checkpoint).
// A section with shards (shards, or train and val; format, align) maps them instead: the
// tokenizer must be ready-made (Tokenizer::pretrained) or saved beside the shards by
// `ablate data prepare` (manifest.json + tokenizer.state, loaded when fit is true), and every
// id must lie below its vocabulary (checked here, before any training).
// A section with a named dataset (dataset: NAME, align; datasets.hpp) prepares it on first
// use and reads its split files as text, or with a ready-made tokenizer its token shards.
TextData load_text_data(const Options& data_opts, const std::string& yaml_dir, Tokenizer& tok,
                        int64_t context, bool fit = true);

// While a DataMemo lives, load_shared_text_data gives the data it loaded last again, without
// reading or encoding the file, to an experiment whose data section, file (path, size,
// modification time), tokenizer and context are the same, and sets the tokenizer to the state
// its fit had then. For commands that build many experiments over one file: a sweep's
// validation builds every point. One lives at a time in a process; it holds one data set.
class DataMemo {
 public:
  DataMemo();
  ~DataMemo();
  DataMemo(const DataMemo&) = delete;
  DataMemo& operator=(const DataMemo&) = delete;
};

// load_text_data's data, shared: the DataMemo's when one lives and holds this data, else read.
// `tokenizer_key` tells tokenizers apart (their type and options).
std::shared_ptr<const TextData> load_shared_text_data(const Options& data_opts,
                                                      const std::string& yaml_dir, Tokenizer& tok,
                                                      const std::string& tokenizer_key,
                                                      int64_t context, bool fit = true);

// Fills x and y (B*T each) with B windows of the training (train = true) or validation
// part. Targets that must not count in the loss (padding; with score_after, the tokens of
// a line up to and including that token, and a line's first token) are -1.
// `step` (1-based, training only) selects the line_weights rules in force; -1 (evaluation,
// estimates): every line equally likely.
void sample_batch(const TextData& data, bool train, int64_t B, int64_t T, Rng& rng, int32_t* x,
                  int32_t* y, int64_t step = -1);

// The whole training or validation part in consecutive windows (train.eval_full): window w of
// a stream (the tokens, or one shard) has inputs t[wT : wT+T] and targets t[wT+1 : wT+T+1],
// so every token but a stream's first is a target exactly once; the last window of a stream
// is cut short (inputs 0 and targets -1 after its end). Random windows only (not windows: lines).
int64_t consecutive_windows(const TextData& data, bool train, int64_t T);
// Fills x and y (B*T each) with windows first .. first+B-1 (rows past the last window: inputs
// 0, targets -1).
void consecutive_batch(const TextData& data, bool train, int64_t first, int64_t B, int64_t T,
                       int32_t* x, int32_t* y);

}  // namespace ablate
