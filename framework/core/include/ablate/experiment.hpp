// An experiment: a YAML file plus command-line overrides `key.path=value`, parsed once
// and then read section by section through Options (which checks every key).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ablate/options.hpp"

namespace ablate {

class Experiment {
 public:
  // Parses `path` and applies overrides; syntax errors name file:line:column.
  static Experiment load(const std::string& path, const std::vector<std::string>& overrides = {});
  // Parses YAML text (file = name shown in messages, dir = where relative paths resolve).
  static Experiment parse(const std::string& text, const std::string& file, const std::string& dir,
                          const std::vector<std::string>& overrides = {});

  Options root() const { return Options(root_, source_, ""); }
  const std::string& file() const { return source_->file; }
  const std::string& dir() const { return dir_; }
  // The config as run (overrides applied, defaulted plugin types filled in).
  std::string yaml() const;
  // Every option read so far with the value it had, defaults and defaulted plugin types
  // included (complete once the model, optimizer, data and trainer are built).
  std::string resolved_yaml() const;
  YAML::Node node() const { return root_; }

 private:
  YAML::Node root_;
  std::shared_ptr<ConfigSource> source_;
  std::string dir_;
};

// Applies one `a.b.c=value` override to a YAML tree (value parsed as YAML). Errors
// (missing '=', empty key, indexing into a scalar) are ConfigErrors.
void apply_override(YAML::Node& root, const std::string& assignment);

// Canonical flat listing "a.b.c: value" of every leaf, sorted; used to compare configs
// (resume refuses a changed config and names the changed keys).
std::vector<std::pair<std::string, std::string>> flatten(const YAML::Node& node);
// Options that change how a run is named, logged or kept, not what it trains: name,
// output.*, train.log_every, train.checkpoint_every, train.keep_checkpoints (a checkpoint
// is written at the optimizer's eval point, which the optimizer contract restores bit for
// bit). Resume and a sweep's finished runs accept a change of them; compare and report do
// not make them dimensions.
bool bookkeeping_option(const std::string& key);
// "key: old -> new" for every leaf that differs between two configs ("key (removed)",
// "key (added)"), sorted by key: what a run's segments record; with results_only, without
// bookkeeping options: what resume refuses and what a sweep point reports.
std::vector<std::string> config_changes(const YAML::Node& old_cfg, const YAML::Node& new_cfg,
                                        bool results_only = false);

}  // namespace ablate
