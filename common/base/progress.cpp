#include "common/base/progress.h"

#include <unistd.h>

#include <cstdio>

namespace pi {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit)
    : label_(std::move(label)),
      total_(total),
      unit_(std::move(unit)),
      tty_(isatty(fileno(stderr)) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

void ProgressBar::Update(int64_t done) {
  const auto now = std::chrono::steady_clock::now();
  // Terminals get ~5 redraws a second, logs one line every 5 seconds.
  const double period = tty_ ? 0.2 : 5.0;
  if (std::chrono::duration<double>(now - last_draw_).count() < period) return;
  last_draw_ = now;
  Draw(done, false);
}

void ProgressBar::Finish() {
  if (finished_) return;
  finished_ = true;
  Draw(total_, true);
}

void ProgressBar::Draw(int64_t done, bool final) {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = elapsed > 0 ? done / elapsed : 0.0;
  const double eta = rate > 0 && total_ > done ? (total_ - done) / rate : 0.0;
  const double pct = total_ > 0 ? 100.0 * done / total_ : 100.0;
  char line[256];
  if (final) {
    snprintf(line, sizeof(line), "%s: %lld/%lld %s in %.1f s (%.1f %s/s)", label_.c_str(),
             static_cast<long long>(done), static_cast<long long>(total_), unit_.c_str(), elapsed,
             rate, unit_.c_str());
  } else {
    snprintf(line, sizeof(line), "%s: %5.1f%% %lld/%lld %s, %.1f %s/s, ETA %.0f s", label_.c_str(),
             pct, static_cast<long long>(done), static_cast<long long>(total_), unit_.c_str(), rate,
             unit_.c_str(), eta);
  }
  if (tty_) {
    fprintf(stderr, "\r\033[K%s%s", line, final ? "\n" : "");
  } else {
    fprintf(stderr, "%s\n", line);
  }
  fflush(stderr);
}

}  // namespace pi
