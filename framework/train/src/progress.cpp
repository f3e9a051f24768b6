// The progress line and run.log (see progress.hpp).
#include "progress.hpp"

#include <unistd.h>

#include <cstdio>

#include "ablate/error.hpp"

namespace ablate {

Progress::Progress(bool quiet, int64_t total)
    : quiet_(quiet), tty_(isatty(STDERR_FILENO)), total_(total) {}

void Progress::open_log(const std::string& path) { log_.open(path, std::ios::app); }

void Progress::step(int64_t step, double loss, float lr, double tok_s, double elapsed,
                    double per_step, const std::string& aux) {
  double eta = per_step * static_cast<double>(total_ - step);
  char rate[32], buf[512];  // 12.3k tok/s; below a thousand, whole tokens (34 tok/s)
  if (tok_s >= 1000.0) std::snprintf(rate, sizeof rate, "%.1fk", tok_s / 1000.0);
  else std::snprintf(rate, sizeof rate, "%.0f", tok_s);
  std::snprintf(
      buf, sizeof buf, "step %lld/%lld | loss %.4f%s%s | lr %.2e | %s tok/s | %s elapsed, ETA %s",
      static_cast<long long>(step), static_cast<long long>(total_), loss, aux.empty() ? "" : " | ",
      aux.substr(0, 200).c_str(), lr, rate, hms(elapsed).c_str(), hms(eta).c_str());
  const bool periodic = elapsed - last_print_ >= 10.0 || step == total_;
  if (periodic) {
    last_print_ = elapsed;
    to_log(buf);
  }
  if (quiet_) return;
  if (tty_) std::fprintf(stderr, "\r%-110s", buf);
  else if (periodic) std::fprintf(stderr, "%s\n", buf);
  std::fflush(stderr);
}

void Progress::line(const std::string& s, bool always) {
  to_log(s);
  if (quiet_ && !always) return;
  std::fprintf(stderr, tty_ && !quiet_ ? "\r%-110s\n" : "%s\n", s.c_str());
  std::fflush(stderr);
}

void Progress::to_log(const std::string& s) {
  if (log_.is_open()) log_ << now_iso() << " " << s << "\n" << std::flush;
}

}  // namespace ablate
