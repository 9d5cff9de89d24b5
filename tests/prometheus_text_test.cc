// PrometheusText alone: the exposition format's escaping and histogram lines.
#include "daemon/prometheus_text.h"

#include <catch2/catch.hpp>

#include "daemon/histogram.h"

using namespace depot;

TEST_CASE("label values and help text are escaped", "[prometheus_text]") {
  PrometheusText t;
  t.Family("x_total", "counter", "a \\ and a\nnewline \"kept\"");
  t.Sample("x_total", {{"name", "a\"b\\c\nd"}, {"k", ""}}, uint64_t{3});
  CHECK(t.text() ==
        "# HELP x_total a \\\\ and a\\nnewline \"kept\"\n"
        "# TYPE x_total counter\n"
        "x_total{name=\"a\\\"b\\\\c\\nd\",k=\"\"} 3\n");
}

TEST_CASE("a histogram's buckets are cumulative, scaled, and end at +Inf", "[prometheus_text]") {
  static constexpr uint64_t kBounds[] = {1000, 4000};
  Histogram h(kBounds);
  for (uint64_t v : {10, 1000, 1001, 5000, 6000}) h.Observe(v);
  PrometheusText t;
  t.Histogram("d_seconds", {{"type", "get"}}, h, 1e9);
  CHECK(t.text() ==
        "d_seconds_bucket{type=\"get\",le=\"1e-06\"} 2\n"
        "d_seconds_bucket{type=\"get\",le=\"4e-06\"} 3\n"
        "d_seconds_bucket{type=\"get\",le=\"+Inf\"} 5\n"
        "d_seconds_sum{type=\"get\"} 1.3011e-05\n"
        "d_seconds_count{type=\"get\"} 5\n");
}
