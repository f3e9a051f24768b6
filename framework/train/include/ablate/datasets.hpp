// Named public datasets, `data: {dataset: NAME}` (docs/DATA.md "Named datasets"): each one's
// published files (their URL and SHA-256, or size where no digest is published, are known
// files of data_source.hpp), its standard split, and its preparation in the cache directory
// on first use: the text unpacked and cut into split files, then, for a ready-made tokenizer,
// tokenized into token shards (ablate data prepare's library). Known: tinyshakespeare,
// enwik8, text8, tinystories.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "ablate/data_source.hpp"
#include "ablate/tokenizer.hpp"

namespace ablate {

struct NamedDataset {
  const char* name;
  const char* summary;   // one line: what it is and how it is split
  const char* file;      // the published file: the text, or a zip archive holding `member`
  const char* member;    // the text's name in the archive; "" : `file` is the text
  const char* val_file;  // the published validation file; "" : the text is split by bytes
  int64_t train_parts, val_parts,
      test_parts;      // the byte split, in parts of their sum (enwik8: 90, 5, 5)
  int64_t text_bytes;  // the published text's size (with val_file: the training file's)
  int64_t val_bytes;   // the published validation file's size (0 without val_file)
  const char*
      text_sha256;  // the published text's SHA-256; "" : none is published (the sizes are compared)
  const char* separator;  // the text between two documents; "" : a split is one document
};

const std::vector<NamedDataset>& named_datasets();
// The dataset of that name, or null.
const NamedDataset* find_named_dataset(const std::string& name);

// A named dataset's text, split, in its cache directory.
struct DatasetSplits {
  std::string dir;               // <cache>/<name>: the split files, splits.json, the token shards
  std::string train, val, test;  // the splits' text files; test "" where the dataset has none
  std::string source;            // the file the text came from (the archive, or the training file)
  std::string
      sha256;  // of the whole text (the archive's member; with val_file: both files in turn)
  bool published = true;  // the text is the published one (its SHA-256, else its sizes)
};

// Finds the dataset's file (the data search order of resolve_data_file; for an archive, its
// member unpacked already is taken too), downloading it into the cache directory when it is
// nowhere (checked by SHA-256 or size; offline, the error gives the command that downloads
// it), and cuts the text into split files in <cache>/<name>: once, and again when the source
// file changes (its path, size or modification time; splits.json records them). A text that
// is not the published one (a file of the same name with other contents) is split all the
// same, with a warning on stderr: its results do not compare with published ones. Holds a
// lock on the directory (<cache>/<name>/.lock) while it works, so concurrent runs wait for
// one another.
DatasetSplits dataset_splits(const NamedDataset& ds, const std::string& yaml_dir,
                             const DataSearchOptions& opt = {});

// The directory of token shards of the splits for a ready-made tokenizer, <dir>/shards-<first
// 12 hex digits of the SHA-256 of tok.save()>, made with prepare_shards on first use (the
// training split's documents, the validation split's as --val; documents cut at the dataset's
// separator). `test`: the test split in the validation split's place (directory
// shards-<hex>-test). `tokenizer_name` and `tokenizer_options` go to its manifest.
std::string dataset_shards(
    const NamedDataset& ds, const DatasetSplits& splits, Tokenizer& tok,
    const std::string& tokenizer_name,
    const std::vector<std::pair<std::string, std::string>>& tokenizer_options, bool test = false);

// Streams the bytes of `member` of the zip archive `zip_path` to `out` (stored or deflated;
// not zip64), and checks its CRC-32 and size. Errors name the archive and what is wrong (no
// such member: the members there are listed).
void unzip_member(const std::string& zip_path, const std::string& member,
                  const std::function<void(const char*, size_t)>& out);
// The uncompressed size of `member` of the zip archive (the central directory's).
int64_t zip_member_size(const std::string& zip_path, const std::string& member);

}  // namespace ablate
