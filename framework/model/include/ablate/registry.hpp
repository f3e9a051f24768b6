// Finds, loads and instantiates plugins. Libraries are searched in: directories given
// with add_directory() (the CLI's --plugin-dir), those in ABLATE_PLUGIN_PATH, the
// installed plugin directory next to the core library (<libdir>/ablate/plugins), then the
// build's plugin directory. Loaded libraries stay
// loaded for the life of the process (plugin objects' vtables live in them).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "ablate/family.hpp"
#include "ablate/plugin.hpp"

namespace ablate {

struct PluginEntry {
  const PluginInfo* info = nullptr;
  std::string file;  // the library it came from
};

class PluginRegistry {
 public:
  static PluginRegistry& instance();

  // Adds a directory searched before the default ones (call before first use).
  void add_directory(const std::string& dir);
  // Loads one library file; errors (missing file, no ablate symbol, API mismatch,
  // duplicate name) are thrown as Error naming the file.
  const PluginEntry& load_file(const std::string& path);
  // Loads every plugin library in the search path (once).
  void load_all();
  // Removes a library's variant from the registry (the library stays mapped). For
  // tests and `ablate plugin check`, which load libraries that are not in the path.
  void unregister(const PluginEntry& entry);

  std::vector<std::string> directories() const;
  std::vector<std::string> families() const;
  std::vector<const PluginEntry*> variants(const std::string& family);
  const PluginEntry* find(const std::string& family, const std::string& name);

  // Creates the variant named by opts["type"] (or by opts being a scalar), checks that
  // every option was read, and returns it. Unknown names are ConfigErrors with the
  // location, the available variants and a did-you-mean.
  template <class Base>
  std::unique_ptr<Base> create(const Options& opts, const BuildContext& ctx) {
    std::unique_ptr<Base> obj(static_cast<Base*>(create_raw(Base::kFamily, opts, ctx)));
    opts.check_unused({"type"});  // after taking ownership: an unknown key must not leak obj
    return obj;
  }
  // Constructs the variant without checking for unread options (create<> does that).
  void* create_raw(const std::string& family, const Options& opts, const BuildContext& ctx);
  // The variant name an Options selects ("type" key or scalar shorthand).
  static std::string type_of(const Options& opts);

 private:
  PluginRegistry() = default;
  struct Impl;
  std::shared_ptr<Impl> impl_;
  Impl& impl();
};

// The BuildContext of a variant that is no part of a model (tokenizer, optimizer, scheduler,
// objective, task, evaluator): no model dimensions, no block parts, no vocabulary, and an
// empty parameter store of its own. It converts to the BuildContext it holds, so a temporary
// serves a create call: registry.create<Tokenizer>(options, StandaloneContext()).
class StandaloneContext {
 public:
  explicit StandaloneContext(uint64_t seed = 0) : ctx_{ModelDims{}, ParamScope(store_, ""), seed} {}
  StandaloneContext(const StandaloneContext&) = delete;  // ctx_ points at store_
  StandaloneContext& operator=(const StandaloneContext&) = delete;
  operator const BuildContext&() const { return ctx_; }

 private:
  ParamStore store_;
  BuildContext ctx_;
};

}  // namespace ablate
