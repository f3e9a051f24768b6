// Test library: a shared library with an "ablate" section but no plugin symbol.
__attribute__((section("ablate"), used)) static const char kNotAPlugin[] = "nothing here";
