// ablate plugins: lists every family, variant, summary and option (with defaults).
#include <iostream>
#include <vector>

#include "ablate/conformance.hpp"
#include "ablate/family.hpp"
#include "ablate/registry.hpp"
#include "commands.hpp"

namespace po = boost::program_options;

static int cmd_plugins(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()("family", po::value<std::string>(), "show only this family")(
      "plugin-dir", po::value<std::vector<std::string>>()->composing(),
      "extra plugin directory (repeatable)");
  po::positional_options_description pos;
  pos.add("family", 1);
  po::variables_map vm;
  if (!ablate::cli::parse(args, "ablate plugins [FAMILY]", opts, pos, vm)) return 0;
  ablate::cli::add_plugin_dirs(vm);
  auto& reg = ablate::PluginRegistry::instance();
  reg.load_all();
  // Every declared family (with or without variants), then any family a plugin names
  // that ablate does not have (no experiment can use those).
  std::vector<std::string> families = ablate::family_names();
  for (const auto& f : reg.families())
    if (!ablate::find_family(f)) families.push_back(f);
  if (vm.count("family")) {
    std::string f = vm["family"].as<std::string>();
    if (std::find(families.begin(), families.end(), f) == families.end()) {
      std::string dym = ablate::did_you_mean(f, families);
      throw ablate::cli::UsageError("unknown family '" + f +
                                    "'. Available: " + ablate::join(families) +
                                    (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
    }
    families = {f};
  }
  // Options are discovered by constructing each variant from an empty map in describe
  // mode: the documentation is the code that reads them.
  ablate::ModelDims dims;
  dims.vocab_size = 65;
  dims.d_model = 48;
  dims.n_heads = 4;
  dims.n_layers = 2;
  dims.context = 32;
  const std::vector<std::string> vocab =
      ablate::conformance::small_vocab(dims.vocab_size);  // for variants that read tokens
  for (const auto& f : families) {
    const ablate::FamilyDescriptor* fd = ablate::find_family(f);
    std::cout << f;
    if (fd)
      std::cout << " (" << fd->key << (fd->list ? ": a list" : "")
                << (fd->default_variant.empty() ? "" : ", default " + fd->default_variant) << ") — "
                << fd->summary;
    else std::cout << " — not a family of this ablate: no experiment can use these";
    std::cout << "\n";
    for (const auto* e : reg.variants(f)) {
      std::cout << "  " << e->info->name << " — " << e->info->summary << "\n";
      ablate::ParamStore store;
      ablate::Options o = ablate::Options::describe(f);
      std::vector<std::pair<std::string, std::vector<ablate::OptionDoc>>> more;
      try {
        void* obj = e->info->create(
            o, ablate::BuildContext{dims, ablate::ParamScope(store, ""), 0, nullptr, &vocab});
        try {
          if (fd && fd->more_options) more = fd->more_options(obj);
        } catch (const std::exception&) {
        }
        e->info->destroy(obj);
      } catch (const std::exception&) {
        // Variants with required options may refuse an empty map; what was read is listed.
      }
      auto print = [](const std::vector<ablate::OptionDoc>& docs) {
        for (const auto& d : docs)
          std::cout << "      " << d.key << " (" << d.type << ", default " << d.default_value << ")"
                    << (d.help.empty() ? "" : ": " + d.help) << "\n";
      };
      print(o.docs());
      for (const auto& [heading, docs] : more) {
        std::cout << "    " << heading << ":\n";
        print(docs);
      }
    }
  }
  std::cout << "\nsearched: " << ablate::join(reg.directories()) << "\n";
  return 0;
}

ABLATE_COMMAND("plugins", "list plugin families, variants and their options", cmd_plugins);
