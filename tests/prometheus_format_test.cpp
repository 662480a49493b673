// common/base/metrics.h against Prometheus's text exposition format, written
// out by hand: histogram buckets (cumulative, +Inf, _sum, _count), label
// escaping, sample values.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "common/base/metrics.h"

namespace pi {
namespace {

TEST(PrometheusFormat, HistogramRendersCumulativeBuckets) {
  Histogram h({0.1, 1});
  for (double v : {0.05, 0.1, 0.5, 3.0}) h.Observe(v);
  std::string out;
  h.Render("x_seconds", "worker=\"gpu\"", &out);
  EXPECT_EQ(out,
            "x_seconds_bucket{worker=\"gpu\",le=\"0.1\"} 2\n"  // 0.1 falls in le="0.1"
            "x_seconds_bucket{worker=\"gpu\",le=\"1\"} 3\n"
            "x_seconds_bucket{worker=\"gpu\",le=\"+Inf\"} 4\n"
            "x_seconds_sum{worker=\"gpu\"} 3.65\n"
            "x_seconds_count{worker=\"gpu\"} 4\n");
}

TEST(PrometheusFormat, EmptyHistogramAndNoLabels) {
  Histogram h({1});
  std::string out;
  h.Render("y", "", &out);
  EXPECT_EQ(out, "y_bucket{le=\"1\"} 0\ny_bucket{le=\"+Inf\"} 0\ny_sum 0\ny_count 0\n");
}

TEST(PrometheusFormat, LabelsAreEscaped) {
  std::string l;
  AppendLabel("a", "plain", &l);
  AppendLabel("b", "q\"uote\\back\nline", &l);
  EXPECT_EQ(l, "a=\"plain\",b=\"q\\\"uote\\\\back\\nline\"");
}

TEST(PrometheusFormat, SampleValues) {
  std::string out;
  AppendMetricHeader("z_total", "counter", "Things.", &out);
  AppendSample("z_total", "", 42, &out);
  AppendSample("z", "k=\"v\"", 0.25, &out);
  AppendSample("z", "", NAN, &out);
  AppendSample("z", "", INFINITY, &out);
  AppendSample("z", "", -INFINITY, &out);
  EXPECT_EQ(out,
            "# HELP z_total Things.\n# TYPE z_total counter\nz_total 42\nz{k=\"v\"} 0.25\n"
            "z NaN\nz +Inf\nz -Inf\n");
}

}  // namespace
}  // namespace pi
