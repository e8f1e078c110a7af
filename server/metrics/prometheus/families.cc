// Family helpers (server/metrics/prometheus/families.h).
#include "server/metrics/prometheus/families.h"

#include <limits>
#include <utility>

#include "prometheus/text_serializer.h"

namespace cgacct {
namespace {

constexpr double kNanosPerSecond = 1e9;

}  // namespace

prometheus::MetricFamily Family(std::string name, std::string help,
                                prometheus::MetricType type) {
  prometheus::MetricFamily family;
  family.name = std::move(name);
  family.help = std::move(help);
  family.type = type;
  return family;
}

prometheus::ClientMetric CounterMetric(
    double value, std::vector<prometheus::ClientMetric::Label> labels) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  metric.counter.value = value;
  return metric;
}

prometheus::ClientMetric GaugeMetric(
    double value, std::vector<prometheus::ClientMetric::Label> labels) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  metric.gauge.value = value;
  return metric;
}

prometheus::ClientMetric HistogramMetric(
    const LatencyHistogram::Snapshot& snapshot,
    std::vector<prometheus::ClientMetric::Label> labels) {
  prometheus::ClientMetric metric;
  metric.label = std::move(labels);
  metric.histogram.sample_count = snapshot.count;
  metric.histogram.sample_sum =
      static_cast<double>(snapshot.sum_ns) / kNanosPerSecond;
  uint64_t cumulative = 0;
  for (int i = 0; i <= snapshot.nr_finite; ++i) {
    cumulative += snapshot.buckets[i];
    prometheus::ClientMetric::Bucket bucket;
    bucket.cumulative_count = cumulative;
    bucket.upper_bound = i < snapshot.nr_finite
                             ? snapshot.upper_bound_seconds(i)
                             : std::numeric_limits<double>::infinity();
    metric.histogram.bucket.push_back(bucket);
  }
  return metric;
}

std::string SerializeMetrics(const prometheus::Collectable& collectable) {
  return prometheus::TextSerializer().Serialize(collectable.Collect());
}

}  // namespace cgacct
