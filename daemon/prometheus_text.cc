#include "daemon/prometheus_text.h"

#include <fmt/format.h>

namespace depot {
namespace {

// Label values escape backslash, double quote and newline; HELP text backslash and newline.
void Escape(std::string& out, std::string_view text, bool quote) {
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '"' && quote) {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

}  // namespace

void PrometheusText::Family(std::string_view name, std::string_view type, std::string_view help) {
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  Escape(out_, help, false);
  fmt::format_to(std::back_inserter(out_), "\n# TYPE {} {}\n", name, type);
}

void PrometheusText::Name(std::string_view name, Labels labels, std::string_view extra_key,
                          std::string_view extra_value) {
  out_ += name;
  if (labels.size() == 0 && extra_key.empty()) return;
  char sep = '{';
  auto label = [&](std::string_view key, std::string_view value) {
    out_ += sep;
    out_ += key;
    out_ += "=\"";
    Escape(out_, value, true);
    out_ += '"';
    sep = ',';
  };
  for (const auto& [key, value] : labels) label(key, value);
  if (!extra_key.empty()) label(extra_key, extra_value);
  out_ += '}';
}

void PrometheusText::Sample(std::string_view name, Labels labels, uint64_t value) {
  Name(name, labels);
  fmt::format_to(std::back_inserter(out_), " {}\n", value);
}

void PrometheusText::Sample(std::string_view name, Labels labels, double value) {
  Name(name, labels);
  fmt::format_to(std::back_inserter(out_), " {}\n", value);
}

void PrometheusText::Histogram(std::string_view name, Labels labels, const depot::Histogram& h,
                               double unit) {
  std::string bucket = fmt::format("{}_bucket", name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.bounds().size(); ++i) {
    cumulative += h.bucket(i);
    Name(bucket, labels, "le", fmt::format("{}", static_cast<double>(h.bounds()[i]) / unit));
    fmt::format_to(std::back_inserter(out_), " {}\n", cumulative);
  }
  cumulative += h.bucket(h.bounds().size());
  Name(bucket, labels, "le", "+Inf");
  fmt::format_to(std::back_inserter(out_), " {}\n", cumulative);
  Sample(fmt::format("{}_sum", name), labels, static_cast<double>(h.sum()) / unit);
  Sample(fmt::format("{}_count", name), labels, cumulative);
}

}  // namespace depot
