// Prometheus's text exposition format for /metrics, and the one metric kind
// that needs state of its own: a histogram of fixed buckets, updated with
// relaxed atomics where things happen (a decode step observes its round
// trips without a lock or an allocation) and read when scraped.
//
//   # HELP pi_requests_total Requests by outcome.
//   # TYPE pi_requests_total counter
//   pi_requests_total{outcome="completed"} 3
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pi {

class Histogram {
 public:
  // `bounds`: the buckets' upper bounds, ascending (+Inf is implied).
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);
  // Appends name_bucket{labels,le=...} (cumulative), name_sum and
  // name_count; `labels` is "" or `key="value",...` (AppendLabel's output).
  void Render(const std::string& name, const std::string& labels, std::string* out) const;

  // Buckets for durations in seconds: a worker step (microseconds to a
  // second), a token (a millisecond to seconds), a first token (up to a
  // minute).
  static std::vector<double> StepSeconds();
  static std::vector<double> TokenSeconds();
  static std::vector<double> FirstTokenSeconds();

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<int64_t>[]> counts_;  // [bounds + 1], not cumulative
  std::atomic<int64_t> sum_ns_{0};                  // the sum in units of 1e-9
};

// "# HELP name help\n# TYPE name type\n".
void AppendMetricHeader(const std::string& name, const char* type, const char* help,
                        std::string* out);
// `name{labels} value\n` (labels "" for none).
void AppendSample(const std::string& name, const std::string& labels, double value,
                  std::string* out);
// Appends `key="value"` to a label list (a comma first unless empty), the
// value escaped as the format asks (backslash, quote, newline).
void AppendLabel(const char* key, const std::string& value, std::string* labels);

}  // namespace pi
