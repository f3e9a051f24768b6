// Token shards as an experiment's training data (data.hpp): the data section's shard
// options, the files they name, the tokenizer they were made with, and windows drawn from
// them. Internal to the train layer (used by data.cpp).
#pragma once
#include <string>
#include <vector>

#include "ablate/data.hpp"

namespace ablate {

// Whether a data section names token shards (shards, train or val) rather than a text file.
bool names_shards(const Options& data_opts);

// The section's shard options and the files they name, read and checked.
struct ShardSpec {
  std::string where;  // the directory, or "TRAIN_PATTERN and VAL_PATTERN"
  std::vector<std::string> train_files, val_files;  // sorted by name
  ShardLayout layout = ShardLayout::kHeader;
  bool align_documents = false;
  std::string manifest;  // manifest.json beside the training shards, "" if none
};
ShardSpec read_shard_spec(const Options& data_opts, const std::string& yaml_dir);

// Every file's path, size and modification time: tells whether shards changed (DataMemo).
std::string shard_files_key(const ShardSpec& spec);

// Maps the files into d, sets up the tokenizer (see load_text_data) and checks every id
// against its vocabulary and that each part holds a window of context + 1 tokens.
void load_shard_data(const Options& data_opts, const ShardSpec& spec, Tokenizer& tok,
                     int64_t context, bool fit, TextData& d);

// B windows of one split: a shard drawn in proportion to its windows, then a start (any
// offset, or with align: documents an end-of-text offset); one random number a window.
void sample_shard_windows(const ShardSplit& s, int64_t B, int64_t T, Rng& rng, int32_t* x,
                          int32_t* y);

}  // namespace ablate
