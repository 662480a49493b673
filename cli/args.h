// ArgReader: the flag loop shared by the cli mains. Each main walks argv with
// it, so every tool reports a missing or malformed value the same way:
// "pi-run: -n expects an integer, got 'abc'".
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace pi {

// "a,b,,c" -> {"a", "b", "", "c"}: every item of a comma list, empty ones
// too, so the caller can name a bad one ("" -> {""}).
std::vector<std::string> SplitCommaList(const std::string& list);

class ArgReader {
 public:
  ArgReader(const char* tool, int argc, char** argv) : tool_(tool), argc_(argc), argv_(argv) {}

  // The flag loop of every tool. Each argument goes to `handle`, which reads the
  // flag's values and returns false for one it does not know (an "unknown flag"
  // error); -h or --help prints `usage` instead. Returns 0 after --help, 2 after
  // an error (already printed), and -1 once every argument was read.
  int ReadFlags(const std::function<bool(const std::string& flag)>& handle,
                const std::function<void()>& usage);

  bool Done() const { return i_ >= argc_; }
  // The current flag, advancing past it.
  std::string Next() { return argv_[i_++]; }

  // Values of the flag just read by Next(). On error they print a message and
  // set failed(); the caller checks failed() after each flag.
  std::string String(const std::string& flag);
  int Int(const std::string& flag);
  int64_t Int64(const std::string& flag);
  float Float(const std::string& flag);
  // A comma list of integers in [min, max], e.g. "1,2,8": an empty item, a
  // non-integer or a value out of range is an error naming the item.
  std::vector<int64_t> IntList(const std::string& flag, int64_t min, int64_t max);
  // A size with optional K/M/G/T suffix (powers of 1024, "GiB" and "GB" read
  // as "G"), e.g. "11G"; negative, non-finite or above 4 EiB is an error.
  int64_t Bytes(const std::string& flag) { return Size(flag, 1.0); }
  // --vram-budget's sizes, as the original PowerInfer reads them: a bare
  // number is GiB ("8" = 8 GiB, "0.5"), a suffix as Bytes ("512M", "11GiB",
  // "4096B" for bytes), and "auto" or -1 is kVramBudgetAuto (the device's
  // free memory less a margin, resolved where the device is known).
  static constexpr int64_t kVramBudgetAuto = -2;
  int64_t VramBudget(const std::string& flag);
  // A comma list of them, one per device ("11G,7G"); one value is a list of one.
  std::vector<int64_t> VramBudgets(const std::string& flag);

  // Prints "tool: message" to stderr and marks failure.
  void Fail(const std::string& message);
  bool failed() const { return failed_; }

 private:
  const char* Value(const std::string& flag);
  // A size whose bare number is multiplied by `bare` (1: bytes).
  int64_t Size(const std::string& flag, double bare);
  int64_t ParseSize(const std::string& flag, const char* v, double bare);
  const char* tool_;
  int argc_;
  char** argv_;
  int i_ = 1;
  bool failed_ = false;
};

}  // namespace pi
