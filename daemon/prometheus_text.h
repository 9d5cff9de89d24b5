// PrometheusText writes metrics in the Prometheus text exposition format (version 0.0.4): each
// family once, with its HELP and TYPE lines, then its samples, label values escaped. It knows
// the format, not depot: metrics_report says what to write.
//
// A plain builder; not thread-safe.
#ifndef DEPOT_DAEMON_PROMETHEUS_TEXT_H_
#define DEPOT_DAEMON_PROMETHEUS_TEXT_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "daemon/histogram.h"

namespace depot {

class PrometheusText {
 public:
  using Labels = std::initializer_list<std::pair<std::string_view, std::string_view>>;

  // Starts a family: `type` is counter, gauge, histogram or info-as-gauge ("gauge").
  void Family(std::string_view name, std::string_view type, std::string_view help);

  // One sample of the family last started (`name` may add a suffix to it, as _bucket does).
  void Sample(std::string_view name, Labels labels, uint64_t value);
  void Sample(std::string_view name, Labels labels, double value);

  // A histogram's samples: cumulative _bucket lines (bounds and sum divided by `unit`, e.g. 1e9
  // for nanoseconds observed and seconds printed: a division keeps 1000 / 1e9 exactly 1e-06),
  // _sum and _count.
  void Histogram(std::string_view name, Labels labels, const depot::Histogram& h, double unit);

  const std::string& text() const { return out_; }

 private:
  void Name(std::string_view name, Labels labels, std::string_view extra_key = {},
            std::string_view extra_value = {});
  std::string out_;
};

}  // namespace depot

#endif  // DEPOT_DAEMON_PROMETHEUS_TEXT_H_
