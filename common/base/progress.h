// ProgressBar: one self-overwriting stderr line for long work (loading,
// profiling, training, conversion): done/total, rate and ETA. Redraws at most
// a few times a second; prints plain lines when stderr is not a terminal.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace pi {

class ProgressBar {
 public:
  ProgressBar(std::string label, int64_t total, std::string unit = "it");
  void Update(int64_t done);
  void Finish();

 private:
  void Draw(int64_t done, bool final);
  std::string label_;
  int64_t total_;
  std::string unit_;
  bool tty_;
  std::chrono::steady_clock::time_point start_, last_draw_;
  bool finished_ = false;
};

// Seconds since an arbitrary epoch, monotonic.
double NowSeconds();

}  // namespace pi
