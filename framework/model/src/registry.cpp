// Plugin discovery and loading with Boost.DLL (see registry.hpp).
#include <vector>  // before library_info.hpp with BOOST_DLL_USE_STD_FS
#include "ablate/registry.hpp"

#include <algorithm>
#include <boost/dll/library_info.hpp>
#include <boost/dll/runtime_symbol_info.hpp>
#include <boost/dll/shared_library.hpp>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <iostream>
#include <mutex>
#include <set>

namespace ablate {
namespace fs = std::filesystem;

struct PluginRegistry::Impl {
  std::mutex mutex;
  std::vector<std::string> extra_dirs;
  bool loaded_all = false;
  std::vector<boost::dll::shared_library> libraries;  // never unloaded
  std::vector<std::unique_ptr<PluginEntry>> entries;
  std::map<std::string, const PluginEntry*> by_file;
  std::set<std::string> warned;  // libraries in the path that are not plugins, reported once
};

PluginRegistry& PluginRegistry::instance() {
  // Deliberately leaked: plugin objects destroyed during static destruction still
  // need their libraries mapped.
  static PluginRegistry* r = new PluginRegistry();
  return *r;
}

PluginRegistry::Impl& PluginRegistry::impl() {
  if (!impl_) impl_ = std::make_shared<Impl>();
  return *impl_;
}

void PluginRegistry::add_directory(const std::string& dir) {
  if (!fs::is_directory(dir))
    throw Error("plugin directory '" + dir +
                "' does not exist (given with --plugin-dir or add_directory)");
  auto& d = impl().extra_dirs;
  if (std::find(d.begin(), d.end(), dir) == d.end()) d.push_back(dir);
  impl().loaded_all = false;
}

std::vector<std::string> PluginRegistry::directories() const {
  std::vector<std::string> dirs;
  if (impl_) dirs = impl_->extra_dirs;
  if (const char* env = std::getenv("ABLATE_PLUGIN_PATH")) {
    std::string s = env;
    size_t start = 0;
    while (start <= s.size()) {
      size_t end = s.find(':', start);
      if (end == std::string::npos) end = s.size();
      if (end > start) dirs.push_back(s.substr(start, end - start));
      start = end + 1;
    }
  }
  // Installed layout relative to the core library: <prefix>/lib/ablate/plugins. First, so
  // that an installed ablate uses its own plugins even while its build tree still exists.
  boost::dll::fs::path self = boost::dll::this_line_location();
  dirs.push_back((self.parent_path() / "ablate" / "plugins").string());
  dirs.push_back(ABLATE_DEFAULT_PLUGIN_DIR);
  dirs.push_back(ABLATE_INSTALL_PLUGIN_DIR);
  std::vector<std::string> unique;
  for (auto& d : dirs) {
    std::error_code ec;
    fs::path canon = fs::weakly_canonical(d, ec);
    std::string c = ec ? d : canon.string();
    if (std::find(unique.begin(), unique.end(), c) == unique.end()) unique.push_back(c);
  }
  return unique;
}

const PluginEntry& PluginRegistry::load_file(const std::string& path_in) {
  auto& im = impl();
  std::error_code ec;
  fs::path canon = fs::weakly_canonical(path_in, ec);
  std::string path = ec ? path_in : canon.string();
  if (auto it = im.by_file.find(path); it != im.by_file.end()) return *it->second;
  if (!fs::exists(path)) throw Error(path + ": plugin library not found");
  try {
    boost::dll::library_info info(path);
    auto syms = info.symbols("ablate");
    if (std::find(syms.begin(), syms.end(), "ablate_plugin") == syms.end())
      throw Error(path +
                  ": not an ablate plugin (no symbol 'ablate_plugin' in section 'ablate'; "
                  "register the variant with ABLATE_PLUGIN(...))");
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Error(path + ": cannot read the library (" + e.what() + ")");
  }
  boost::dll::shared_library lib;
  try {
    lib.load(path, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_global);
  } catch (const std::exception& e) {
    // Boost.DLL's message wraps dlerror() and ends with an unrelated errno text ("Bad file
    // descriptor"): keep the dlerror part.
    std::string why = e.what();
    const std::string tag = "dlerror system message: ";
    if (auto at = why.find(tag); at != std::string::npos) {
      why = why.substr(at + tag.size());
      if (auto end = why.rfind(')'); end != std::string::npos) why.resize(end);
    }
    throw Error(path + ": cannot load plugin library: " + why +
                (why.find("undefined symbol") != std::string::npos
                     ? " (a missing symbol usually means it was built against another ablate "
                       "version: rebuild it)"
                     : ""));
  }
  if (!lib.has("ablate_plugin"))
    throw Error(path + ": not an ablate plugin (no exported symbol 'ablate_plugin')");
  const PluginInfo& pi = lib.get_alias<const PluginInfo>("ablate_plugin");
  if (pi.api_version != kPluginApiVersion)
    throw Error(path + ": plugin API version " + std::to_string(pi.api_version) +
                ", but this ablate expects " + std::to_string(kPluginApiVersion) +
                "; rebuild the plugin against this ablate");
  if (!pi.family || !pi.name || !pi.create || !pi.destroy)
    throw Error(path +
                ": plugin info is incomplete (register the variant with ABLATE_PLUGIN(...))");
  for (const auto& e : im.entries)
    if (e->info->family == std::string(pi.family) && e->info->name == std::string(pi.name))
      throw Error(path + ": duplicate plugin: " + pi.family + " '" + pi.name +
                  "' is already provided by " + e->file +
                  "; remove one of them from the plugin path");
  im.libraries.push_back(std::move(lib));
  auto entry = std::make_unique<PluginEntry>();
  entry->info = &pi;
  entry->file = path;
  im.entries.push_back(std::move(entry));
  im.by_file[path] = im.entries.back().get();
  return *im.entries.back();
}

void PluginRegistry::load_all() {
  auto& im = impl();
  std::lock_guard<std::mutex> lock(im.mutex);
  if (im.loaded_all) return;
  std::vector<std::string> seen_names;  // a file name found in two directories: the first wins
  for (const auto& dir : directories()) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> files;
    for (const auto& f : fs::directory_iterator(dir, ec))
      if (f.path().extension() == ".so") files.push_back(f.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::string stem = f.filename().string();
      if (std::find(seen_names.begin(), seen_names.end(), stem) != seen_names.end()) continue;
      // Only libraries that carry an ablate section are plugins; others are skipped with a
      // warning (once), naming the file and why.
      std::string why;
      try {
        boost::dll::library_info info(f.string());
        auto secs = info.sections();
        if (std::find(secs.begin(), secs.end(), "ablate") == secs.end())
          why = "a shared library without an 'ablate' section (not built with ABLATE_PLUGIN)";
      } catch (const std::exception& e) {
        why = std::string("not a readable shared library (") + e.what() + ")";
      }
      if (!why.empty()) {
        if (im.warned.insert(f.string()).second)
          std::cerr << "warning: skipping " << f.string() << " in the plugin path: " << why
                    << "; remove it from the plugin directory to silence this warning\n";
        continue;
      }
      seen_names.push_back(stem);
      load_file(f.string());
    }
  }
  im.loaded_all = true;
}

void PluginRegistry::unregister(const PluginEntry& entry) {
  auto& im = impl();
  im.by_file.erase(entry.file);
  im.entries.erase(std::remove_if(im.entries.begin(), im.entries.end(),
                                  [&](const auto& e) { return e.get() == &entry; }),
                   im.entries.end());
}

std::vector<std::string> PluginRegistry::families() const {
  std::vector<std::string> f;
  if (!impl_) return f;
  for (const auto& e : impl_->entries)
    if (std::find(f.begin(), f.end(), e->info->family) == f.end()) f.push_back(e->info->family);
  std::sort(f.begin(), f.end());
  return f;
}

std::vector<const PluginEntry*> PluginRegistry::variants(const std::string& family) {
  load_all();
  std::vector<const PluginEntry*> v;
  for (const auto& e : impl().entries)
    if (e->info->family == family) v.push_back(e.get());
  std::sort(v.begin(), v.end(),
            [](auto* a, auto* b) { return std::string(a->info->name) < b->info->name; });
  return v;
}

const PluginEntry* PluginRegistry::find(const std::string& family, const std::string& name) {
  load_all();
  for (const auto& e : impl().entries)
    if (e->info->family == family && e->info->name == name) return e.get();
  return nullptr;
}

std::string PluginRegistry::type_of(const Options& opts) {
  if (!opts.has("type")) opts.fail("type", "missing: name the variant to use");
  return opts.get<std::string>("type", "");
}

void* PluginRegistry::create_raw(const std::string& family, const Options& opts,
                                 const BuildContext& ctx) {
  std::string name = opts.describing() ? "" : type_of(opts);
  opts.mark_used("type");
  const PluginEntry* e = find(family, name);
  if (!e) {
    std::vector<std::string> names;
    for (auto* v : variants(family)) names.push_back(v->info->name);
    std::string dym = did_you_mean(name, names);
    opts.fail("type", "unknown " + family + " '" + name +
                          "'. Available: " + (names.empty() ? "(none found)" : join(names)) +
                          (dym.empty() ? "" : ". Did you mean '" + dym + "'?") +
                          (names.empty() || !dym.empty()
                               ? ""
                               : " (plugin directories searched: " + join(directories()) +
                                     "; add more with --plugin-dir or ABLATE_PLUGIN_PATH)"));
  }
  void* obj = nullptr;
  try {
    obj = e->info->create(opts, ctx);
  } catch (const ConfigError&) {
    throw;
  } catch (const std::exception& ex) {
    opts.fail("type",
              family + " '" + name + "' (" + e->file + ") failed to initialise: " + ex.what());
  }
  return obj;
}

}  // namespace ablate
