#include "common/base/metrics.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>

namespace pi {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(new std::atomic<int64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::Observe(double value) {
  const size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  if (std::isfinite(value)) {
    sum_ns_.fetch_add(static_cast<int64_t>(std::llround(value * 1e9)), std::memory_order_relaxed);
  }
}

void Histogram::Render(const std::string& name, const std::string& labels, std::string* out) const {
  int64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    std::string l = labels;
    char le[32];
    if (i < bounds_.size()) {
      snprintf(le, sizeof le, "%g", bounds_[i]);
    } else {
      snprintf(le, sizeof le, "+Inf");
    }
    AppendLabel("le", le, &l);
    AppendSample(name + "_bucket", l, static_cast<double>(cumulative), out);
  }
  AppendSample(name + "_sum", labels, static_cast<double>(sum_ns_.load()) * 1e-9, out);
  AppendSample(name + "_count", labels, static_cast<double>(cumulative), out);
}

std::vector<double> Histogram::StepSeconds() {
  return {1e-6, 2.5e-6, 5e-6,   1e-5, 2.5e-5, 5e-5,   1e-4, 2.5e-4,
          5e-4, 1e-3,   2.5e-3, 5e-3, 1e-2,   2.5e-2, 0.1,  1};
}

std::vector<double> Histogram::TokenSeconds() {
  return {1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5};
}

std::vector<double> Histogram::FirstTokenSeconds() {
  return {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

void AppendMetricHeader(const std::string& name, const char* type, const char* help,
                        std::string* out) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void AppendSample(const std::string& name, const std::string& labels, double value,
                  std::string* out) {
  char v[40];
  if (std::isnan(value)) {
    snprintf(v, sizeof v, "NaN");
  } else if (std::isinf(value)) {
    snprintf(v, sizeof v, value > 0 ? "+Inf" : "-Inf");
  } else if (value == std::floor(value) && std::fabs(value) < 1e15) {
    snprintf(v, sizeof v, "%" PRId64, static_cast<int64_t>(value));
  } else {
    snprintf(v, sizeof v, "%.9g", value);
  }
  *out += name;
  if (!labels.empty()) *out += "{" + labels + "}";
  *out += " ";
  *out += v;
  *out += "\n";
}

void AppendLabel(const char* key, const std::string& value, std::string* labels) {
  if (!labels->empty()) *labels += ",";
  *labels += key;
  *labels += "=\"";
  for (char ch : value) {
    if (ch == '\\') {
      *labels += "\\\\";
    } else if (ch == '"') {
      *labels += "\\\"";
    } else if (ch == '\n') {
      *labels += "\\n";
    } else {
      *labels += ch;
    }
  }
  *labels += "\"";
}

}  // namespace pi
