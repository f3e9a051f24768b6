// Errors thrown by library code. Only the CLI prints them and exits non-zero.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

namespace ablate {

// Any error a user can act on: bad config, bad data, bad plugin, bad checkpoint.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A configuration error; the message already names file:line:column and key path.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// Levenshtein-based suggestion: the closest candidate within a small edit distance,
// or "" when nothing is close. Used for every "did you mean" in ablate.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

// "a, b, c" for messages.
std::string join(const std::vector<std::string>& items, const std::string& sep = ", ");
// A duration as "MM:SS" or "H:MM:SS" ("--:--" when negative or not finite).
std::string hms(double seconds);

}  // namespace ablate
