// ablate plugin new FAMILY NAME: writes a plugin project (source + CMakeLists.txt) that
//   builds against an installed ablate and works as it is.
// ablate plugin check LIBRARY.so: loads a plugin library and runs its family's conformance
//   checks (framework/model/src/conformance/), printing PASS/FAIL per check; exit 1 on failure.
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "ablate/conformance.hpp"
#include "ablate/family.hpp"
#include "ablate/registry.hpp"
#include "commands.hpp"
#include "plugin_templates.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
  return s;
}

// my_ffn -> MyFfn
std::string camel(const std::string& name) {
  std::string out;
  bool up = true;
  for (char c : name) {
    if (c == '_') {
      up = true;
      continue;
    }
    out += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    up = false;
  }
  return out;
}

// How a plugin project finds this ablate's CMake package: -DCMAKE_PREFIX_PATH=<prefix> for an
// installed one (<prefix>/bin/ablate with <prefix>/lib*/cmake/ablate), -Dablate_DIR=<build> for
// a build tree (<build>/ablate beside ablateConfig.cmake and ablateTargets.cmake), else a
// placeholder.
std::string package_flag() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return "-DCMAKE_PREFIX_PATH=<ablate install prefix>";
  const fs::path prefix = exe.parent_path().parent_path();
  for (const char* lib : {"lib", "lib64"})
    if (fs::exists(prefix / lib / "cmake" / "ablate" / "ablateConfig.cmake", ec))
      return "-DCMAKE_PREFIX_PATH=" + prefix.string();
  const fs::path build = exe.parent_path();
  if (fs::exists(build / "ablateConfig.cmake", ec) && fs::exists(build / "ablateTargets.cmake", ec))
    return "-Dablate_DIR=" + build.string();
  return "-DCMAKE_PREFIX_PATH=<ablate install prefix>";
}

// The skeleton of `family`, or a UsageError listing the families that have one.
const ablate::cli::PluginSkeleton& find_skeleton(const std::string& family) {
  std::vector<std::string> families;
  for (const ablate::FamilyDescriptor* d : ablate::families())
    for (const ablate::cli::PluginSkeleton& s : ablate::cli::plugin_skeletons())
      if (s.family == d->name) {
        if (s.family == family) return s;
        families.push_back(d->name);
      }
  const std::string dym = ablate::did_you_mean(family, families);
  throw ablate::cli::UsageError("unknown family '" + family +
                                "'. Available: " + ablate::join(families) +
                                (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
}

void check_variant_name(const std::string& name) {
  if (name.empty() || !std::islower(static_cast<unsigned char>(name[0])) ||
      name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_") != std::string::npos)
    throw ablate::cli::UsageError(
        "name '" + name +
        "' must start with a lower-case letter and contain only lower-case letters, "
        "digits and underscores (it is a YAML value, a C++ identifier and a file name)");
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  if (!f) throw ablate::Error("cannot write " + p.string());
}

// The skeleton's source for variant `name`: its placeholder name my_<family> and class
// My<Family> renamed.
std::string rename_skeleton(const ablate::cli::PluginSkeleton& s, const std::string& name) {
  const std::string placeholder = "my_" + std::string(s.family);
  return replace_all(replace_all(s.source, placeholder, name), camel(placeholder), camel(name));
}

int plugin_new(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()("family", po::value<std::string>(),
                     ("plugin family (" + ablate::join(ablate::family_names()) + ")").c_str())(
      "name", po::value<std::string>(),
      "variant name: lower case, digits, underscores; also the YAML value and the library name")(
      "dir,d", po::value<std::string>(), "project directory to write (default: ./NAME)")(
      "force", po::bool_switch(), "overwrite existing files");
  po::positional_options_description pos;
  pos.add("family", 1).add("name", 1);
  po::variables_map vm;
  if (!ablate::cli::parse(args, "ablate plugin new FAMILY NAME [--dir DIR]", opts, pos, vm))
    return 0;
  if (!vm.count("family") || !vm.count("name"))
    throw ablate::cli::UsageError("give a family and a name, e.g. 'ablate plugin new ffn my_ffn'");
  const std::string family = vm["family"].as<std::string>(), name = vm["name"].as<std::string>();
  const ablate::cli::PluginSkeleton& skeleton = find_skeleton(family);
  check_variant_name(name);
  const fs::path dir = vm.count("dir") ? fs::path(vm["dir"].as<std::string>()) : fs::path(name);
  const fs::path src = dir / (name + ".cpp"), cmake = dir / "CMakeLists.txt";
  if (!vm["force"].as<bool>())
    for (const fs::path& p : {src, cmake})
      if (fs::exists(p))
        throw ablate::Error(p.string() +
                            " already exists; choose another --dir or pass --force to overwrite");
  fs::create_directories(dir);
  write_file(src, rename_skeleton(skeleton, name));
  write_file(cmake, replace_all(ablate::cli::plugin_cmakelists(), "@NAME@", name));

  // How an experiment selects it, as a command-line override.
  const std::string use = ablate::selection_override(ablate::family(family), name);
  const std::string d = dir.string();
  std::cout << "wrote " << src.string() << " (" << family << " '" << name
            << "': " << skeleton.summary << ")\n"
            << "  and " << cmake.string() << "\n\nnext:\n"
            << "  cmake -S " << d << " -B " << d << "/build " << package_flag() << "\n"
            << "  cmake --build " << d << "/build\n"
            << "  ablate plugin check " << d << "/build/" << name << ".so\n"
            << "  ablate run EXPERIMENT.yaml " << use << " --plugin-dir " << d << "/build\n";
  return 0;
}

// The conformance settings from --options and --text.
ablate::conformance::Settings check_settings(const po::variables_map& vm) {
  ablate::conformance::Settings settings;
  if (vm.count("options")) settings.options_yaml = vm["options"].as<std::string>();
  if (vm.count("text")) {
    std::ifstream in(vm["text"].as<std::string>(), std::ios::binary);
    if (!in) throw ablate::Error(vm["text"].as<std::string>() + ": cannot read the text file");
    std::ostringstream s;
    s << in.rdbuf();
    settings.sample_text = s.str();
  }
  return settings;
}

// The child process of `plugin check`: runs the checks, printing each result and the verdict,
// and writes the name of each check as it starts to `started_fd`. Returns the exit status.
int run_checks(const ablate::PluginEntry& e, ablate::conformance::Settings settings,
               int started_fd) {
  const std::string family = e.info->family, name = e.info->name;
  settings.on_start = [&](const std::string& check) {
    const std::string line = check + "\n";
    if (write(started_fd, line.data(), line.size()) < 0) std::perror("plugin check");
  };
  settings.on_result = [](const ablate::conformance::CheckResult& c) {
    std::cout << ablate::conformance::format_check(c) << std::flush;
  };
  try {
    const ablate::conformance::Report r =
        ablate::conformance::check_variant(family, name, settings);
    std::cout << r.checks.size() << " checks: " << r.checks.size() - static_cast<size_t>(r.failed())
              << " passed, " << r.failed() << " failed\n";
    if (r.passed())
      std::cout << "OK: " << family << " '" << name
                << "' passes its conformance checks; use it with --plugin-dir "
                << fs::path(e.file).parent_path().string() << " or ABLATE_PLUGIN_PATH\n";
    else
      std::cout << "FAILED: " << family << " '" << name << "' fails " << r.failed()
                << " of its conformance checks\n";
    return r.passed() ? 0 : 1;
  } catch (const std::exception& ex) {
    std::cout << "error: " << ex.what() << "\n";
    return 1;
  }
}

// Everything written to `fd` until its writer closes it.
std::string read_until_closed(int fd) {
  std::string text, buf(4096, '\0');
  for (ssize_t n; (n = read(fd, buf.data(), buf.size())) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    text.append(buf.data(), static_cast<size_t>(n));
  }
  return text;
}

// Reports the check that was running (the last line of `started`) when signal `sig` ended it.
void report_crash(const ablate::PluginEntry& e, std::string started, int sig) {
  if (!started.empty() && started.back() == '\n') started.pop_back();
  const std::string last =
      started.substr(started.rfind('\n') == std::string::npos ? 0 : started.rfind('\n') + 1);
  std::cout << ablate::conformance::format_check({last.empty() ? "loading" : last, false,
                                                  "the plugin crashed (signal " +
                                                      std::to_string(sig) + ", " + strsignal(sig) +
                                                      "); run it under gdb to see where"})
            << "FAILED: " << e.info->family << " '" << e.info->name << "' crashed\n";
}

// Runs the checks in a child process, so that a plugin that crashes (a segfault in its
// constructor, say) is reported as a failed check instead of taking the checker down.
int run_checks_in_child(const ablate::PluginEntry& e,
                        const ablate::conformance::Settings& settings) {
  int fds[2];
  if (pipe(fds) != 0)
    throw ablate::Error(std::string("plugin check: pipe() failed: ") + std::strerror(errno));
  std::cout.flush();
  const pid_t pid = fork();
  if (pid < 0)
    throw ablate::Error(std::string("plugin check: fork() failed: ") + std::strerror(errno));
  if (pid == 0) {
    close(fds[0]);
    const int rc = run_checks(e, settings, fds[1]);
    std::cout.flush();
    _exit(rc);
  }
  close(fds[1]);
  const std::string started = read_until_closed(fds[0]);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFSIGNALED(status)) {
    report_crash(e, started, WTERMSIG(status));
    return 1;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int plugin_check(const std::vector<std::string>& args) {
  po::options_description opts("options");
  opts.add_options()("library", po::value<std::string>(), "the plugin's shared library (.so)")(
      "options", po::value<std::string>(),
      "options for the variant as a YAML map, e.g. '{hidden: 32}'")(
      "text", po::value<std::string>(),
      "text file for tokenizers and evaluators to fit on (default: a built-in excerpt)")(
      "plugin-dir", po::value<std::vector<std::string>>()->composing(),
      "extra plugin directory (repeatable)");
  po::positional_options_description pos;
  pos.add("library", 1);
  po::variables_map vm;
  if (!ablate::cli::parse(args, "ablate plugin check LIBRARY.so [--options YAML] [--text FILE]",
                          opts, pos, vm))
    return 0;
  if (!vm.count("library"))
    throw ablate::cli::UsageError(
        "give the plugin library, e.g. 'ablate plugin check build/my_ffn.so'");
  ablate::cli::add_plugin_dirs(vm);
  auto& reg = ablate::PluginRegistry::instance();
  // The installed variants first: attention is checked with every positional encoding, and
  // a name clash with an installed variant is reported here rather than at `ablate run`.
  reg.load_all();
  const ablate::PluginEntry& e = reg.load_file(vm["library"].as<std::string>());
  const std::string family = e.info->family;
  std::cout << "checking " << family << " '" << e.info->name << "' from " << e.file << "\n  \""
            << (e.info->summary ? e.info->summary : "") << "\"\n";
  if (!ablate::conformance::has_checks(family)) {
    std::cout << "FAIL: ablate has no family '" << family
              << "' (families: " << ablate::join(ablate::conformance::checked_families())
              << "); no experiment could use this plugin\n";
    return 1;
  }
  return run_checks_in_child(e, check_settings(vm));
}

int cmd_plugin(const std::vector<std::string>& args) {
  const std::string usage =
      "usage: ablate plugin new FAMILY NAME [--dir DIR]   write a plugin project that builds "
      "against this ablate\n"
      "       ablate plugin check LIBRARY.so [--options YAML] [--text FILE]\n"
      "                                                   run the family's conformance checks on a "
      "plugin\n"
      "'ablate plugin new --help' and 'ablate plugin check --help' describe the options; "
      "docs/PLUGINS.md is a tutorial.\n";
  if (args.empty()) throw ablate::cli::UsageError("missing a subcommand: new or check\n" + usage);
  const std::string sub = args[0];
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (sub == "--help" || sub == "-h" || sub == "help") {
    std::cout << usage;
    return 0;
  }
  if (sub == "new") return plugin_new(rest);
  if (sub == "check") return plugin_check(rest);
  const std::string dym = ablate::did_you_mean(sub, {"new", "check"});
  throw ablate::cli::UsageError("unknown subcommand '" + sub + "'; use new or check" +
                                (dym.empty() ? "" : ". Did you mean '" + dym + "'?"));
}

}  // namespace

ABLATE_COMMAND("plugin", "write a new plugin project (new) or check a plugin library (check)",
               cmd_plugin);
