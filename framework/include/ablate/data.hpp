// Training data: a text file split by position into train and validation, tokenized,
// and sampled as random windows X = t[i:i+T], Y = t[i+1:i+T+1] (REFERENCE.md).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ablate/options.hpp"
#include "ablate/tensor.hpp"
#include "ablate/tokenizer.hpp"

namespace ablate {

struct TextData {
  std::string path;                 // the resolved file
  std::string train_text, val_text;
  std::vector<int32_t> train, val;  // token ids
};

// Reads the `data:` section (path, train_fraction), finds and reads the file, fits the
// tokenizer on the training part and encodes both parts. `context` is checked against
// the length of each part.
TextData load_text_data(const Options& data_opts, const std::string& yaml_dir, Tokenizer& tok, int64_t context);

// Fills x and y (B*T each) with B windows of the training (train = true) or validation
// part. Targets that must not count in the loss (padding) are -1.
void sample_batch(const TextData& data, bool train, int64_t B, int64_t T, Rng& rng, int32_t* x, int32_t* y);

}  // namespace ablate
