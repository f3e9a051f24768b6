// A named dataset as an experiment's training data (data: {dataset: NAME}, data.hpp): its
// split files read as text for a tokenizer that is fitted on text, or its token shards for a
// ready-made one. Internal to the train layer (used by data.cpp).
#pragma once
#include <string>

#include "ablate/data.hpp"

namespace ablate {

// Whether a data section names a dataset (data.dataset).
bool names_dataset(const Options& data_opts);

// Reads the section (dataset, align, eval_on), prepares the dataset (datasets.hpp) and loads it
// into d: a tokenizer that is pretrained() reads the token shards made with it (made on first use;
// `tokenizer_key`, the experiment's tokenizer section as YAML, names it in their manifest),
// any other is fitted (fit = true) on the training split and encodes both splits.
void load_dataset_data(const Options& data_opts, const std::string& yaml_dir, Tokenizer& tok,
                       const std::string& tokenizer_key, int64_t context, bool fit, TextData& d);

}  // namespace ablate
