// doctest entry point for the whole suite. A run whose filters select no test case fails:
// ctest runs each case by name (doctest_discover_tests), and a name that CMake splits (a
// ';' in it) or that no longer exists would otherwise pass with nothing run.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <iostream>

namespace {

int g_selected = -1;  // test cases that passed the filters; -1 until a run ends

struct CountSelected : doctest::IReporter {
  explicit CountSelected(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& s) override {
    g_selected = static_cast<int>(s.numTestCasesPassingFilters);
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};
REGISTER_LISTENER("count_selected", 1, CountSelected);

}  // namespace

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int result = context.run();
  if (context.shouldExit() || result != 0) return result;
  if (g_selected == 0) {
    std::cerr
        << "[ablate] no test case matches the filters given (--test-case, --test-suite, ...): "
           "nothing was "
           "tested. A test case's name must not contain ';' (CMake splits it); list the names with "
           "--list-test-cases\n";
    return 1;
  }
  return 0;
}
