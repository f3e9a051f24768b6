// ablate data TASK --train FILE --test FILE [--flag value ...]: writes a task's data sets.
// Tasks are plugins (family "task", ablate/task.hpp; e.g. arithmetic, modadd): `ablate data`
// lists them, `ablate data TASK --help` lists a task's flags, which the task reads as options.
// ablate data prepare INPUT... --out DIR --tokenizer NAME: a text corpus into token shards
// (`prepare` is a reserved word, never a task's name; ablate/prepare.hpp, docs/DATA.md).
#include <iostream>
#include <sstream>

#include "ablate/error.hpp"
#include "ablate/registry.hpp"
#include "ablate/task.hpp"
#include "commands.hpp"

// ablate data prepare (cmd_data_prepare.cpp).
int cmd_data_prepare(const std::vector<std::string>& args);
// ablate data tokenize (cmd_data_tokenize.cpp).
int cmd_data_tokenize(const std::vector<std::string>& args);
// ablate data train-tokenizer (cmd_data_train_tokenizer.cpp).
int cmd_data_train_tokenizer(const std::vector<std::string>& args);

namespace {

// Pulls ablate's own flag --plugin-dir DIR (repeatable) out of args and applies it.
std::vector<std::string> take_plugin_dirs(const std::vector<std::string>& args) {
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--plugin-dir" && i + 1 < args.size())
      ablate::PluginRegistry::instance().add_directory(args[++i]);
    else if (args[i].rfind("--plugin-dir=", 0) == 0)
      ablate::PluginRegistry::instance().add_directory(args[i].substr(13));
    else rest.push_back(args[i]);
  }
  return rest;
}

std::string flag(const std::string& key) {
  std::string f = "--" + key;
  for (char& c : f) c = c == '_' ? '-' : c;
  return f;
}

int cmd_data(const std::vector<std::string>& args_in) {
  if (!args_in.empty() && args_in[0] == "tokenize")
    return cmd_data_tokenize({args_in.begin() + 1, args_in.end()});
  const std::vector<std::string> args = take_plugin_dirs(args_in);
  if (!args.empty() && args[0] == "prepare")
    return cmd_data_prepare({args.begin() + 1, args.end()});
  if (!args.empty() && args[0] == "train-tokenizer")
    return cmd_data_train_tokenizer({args.begin() + 1, args.end()});
  auto& reg = ablate::PluginRegistry::instance();
  std::vector<std::string> names;
  std::string listing;
  for (const ablate::PluginEntry* e : reg.variants(ablate::Task::kFamily)) {
    names.push_back(e->info->name);
    listing += std::string("  ") + e->info->name + " — " + e->info->summary + "\n";
  }
  const std::string usage =
      "usage: ablate data TASK --train train.txt --test test.txt [--flag value ...]\n"
      "       ablate data prepare INPUT... --out DIR --tokenizer NAME [options]  (token shards; "
      "'ablate data prepare --help')\n"
      "       ablate data tokenize --tokenizer NAME [--option key=value ...] [--count] FILE|-  (a "
      "text's token "
      "ids; 'ablate data tokenize --help')\n"
      "       ablate data train-tokenizer --vocab-size N --out tokenizer.json INPUT...  (a "
      "byte-level BPE as "
      "GPT-2's; 'ablate data train-tokenizer --help')\ntasks:\n" +
      listing + "'ablate data TASK --help' lists a task's flags.\n";
  if (args.empty())
    throw ablate::cli::UsageError("missing the task; available: " + ablate::join(names) +
                                  " (or prepare: a corpus into token shards)");
  if (args[0] == "--help" || args[0] == "-h") {
    std::cout << usage;
    return 0;
  }
  const std::string name = args[0];
  if (!reg.find(ablate::Task::kFamily, name)) {
    const std::string dym = ablate::did_you_mean(name, names);
    throw ablate::cli::UsageError("unknown task '" + name + "'. Available: " + ablate::join(names) +
                                  (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
  }
  YAML::Node tn;
  tn["type"] = name;
  auto task = reg.create<ablate::Task>(
      ablate::Options(tn, std::make_shared<ablate::ConfigSource>(), "task"),
      ablate::StandaloneContext());
  // The task's flags, from what write_data reads in describe mode.
  ablate::Options doc = ablate::Options::describe("");
  std::ostringstream ignored;
  task->write_data(doc, ignored);
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  for (const std::string& a : rest)
    if (a == "--help" || a == "-h") {
      std::cout << "usage: ablate data " << name << " [--flag value ...]\nflags:\n";
      for (const auto& d : doc.docs())
        std::cout << "  " << flag(d.key) << " (" << d.type << ", default " << d.default_value << ")"
                  << (d.help.empty() ? "" : ": " + d.help) << "\n";
      return 0;
    }
  const ablate::Options o = ablate::cli::flag_options(rest, "ablate data " + name);
  // Unknown flags are refused before any work.
  std::vector<std::string> known;
  for (const auto& d : doc.docs()) known.push_back(d.key);
  for (const auto& kv : o.node()) {
    const std::string key = kv.first.as<std::string>();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    std::vector<std::string> flags;
    for (const auto& k : known) flags.push_back(flag(k));
    const std::string dym = ablate::did_you_mean(flag(key), flags);
    throw ablate::cli::UsageError("unknown flag " + flag(key) + " for task '" + name + "'" +
                                  (dym.empty() ? "" : ". Did you mean " + dym + "?") +
                                  " Flags: " + ablate::join(flags));
  }
  task->write_data(o, std::cout);
  return 0;
}

}  // namespace

ABLATE_COMMAND("data",
               "write a task's data sets: 'ablate data TASK --train train.txt --test test.txt ...' "
               "(tasks: 'ablate data --help'); "
               "tokenize a corpus into token shards: 'ablate data prepare INPUT... --out DIR "
               "--tokenizer NAME'",
               cmd_data);
