// `ablate data prepare`: a text corpus tokenized into llm.c token shards (docs/DATA.md).
// Text files, directories or globs of them, or JSONL with the text in one field; .gz and
// .zst read as they are. Documents are read in order, encoded in parallel (a TBB pipeline)
// and written in order, each preceded by the tokenizer's end-of-text id, into
// <name>_val_000000.bin, <name>_train_000001.bin, ... (uint16 tokens for vocabularies up to
// 65,536 ids, else the uint32 variant), with manifest.json and tokenizer.state beside them.
// Memory stays bounded whatever the corpus (pieces of at most about 1 MiB of text in flight,
// 8 bytes a document for the duplicate check).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ablate/tokenizer.hpp"

namespace ablate {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files, directories (their files, recursively) or globs
  std::string val_file;  // the validation documents; "" : val_fraction of the inputs' documents
  double val_fraction = 0.005;  // document k is validation when ceil((k+1) f) > ceil(k f): the
                                // first, then every 1/f-th
  std::string field = "text";   // JSONL: the field that holds a document's text
  std::string
      separator;  // text files: cut into documents at this text ("" : a file is one document)
  std::string out_dir;
  std::string name;  // shard names' prefix; "" : the output directory's name
  int64_t shard_tokens = 100000000;
  int64_t fit_bytes =
      int64_t{64}
      << 20;  // a tokenizer that is fitted (not pretrained) fits on this much training text
  bool overwrite = false;  // replace the shards, manifest and tokenizer state of out_dir
  bool quiet = false;      // no progress line (warnings are printed all the same)
};

struct PrepareSummary {
  int64_t documents[2] = {0, 0}, tokens[2] = {0, 0},
          bytes[2] = {0, 0};  // [0] training, [1] validation
  int64_t shards = 0;
  int64_t val_in_train =
      0;  // validation documents whose text also occurs in the training documents
  double seconds = 0;
  std::string manifest;  // the manifest's path
};

// Reads, encodes and writes as PrepareOptions says. `tokenizer_name` and `tokenizer_options`
// (key, value as given) are recorded in the manifest with the sha256 of tok.save(). A
// tokenizer that is not pretrained() is first fitted on the first fit_bytes of the training
// documents (said on stderr). Progress (MB/s, ETA) and warnings go to stderr. On an error
// the shards written so far are removed.
PrepareSummary prepare_shards(
    const PrepareOptions& opt, Tokenizer& tok, const std::string& tokenizer_name,
    const std::vector<std::pair<std::string, std::string>>& tokenizer_options);

}  // namespace ablate
