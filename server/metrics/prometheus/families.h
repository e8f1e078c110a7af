// Helpers every cgacctd collector builds its families with, and the text
// exposition /metrics serves (prometheus-cpp's data model, docs/DESIGN.md §5).
//
// Thread safety: pure functions, thread-safe.
#ifndef CGACCT_SERVER_METRICS_PROMETHEUS_FAMILIES_H_
#define CGACCT_SERVER_METRICS_PROMETHEUS_FAMILIES_H_

#include <string>
#include <vector>

#include "prometheus/client_metric.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"
#include "prometheus/metric_type.h"
#include "server/metrics/histogram.h"

namespace cgacct {

// A family with no metrics yet.
prometheus::MetricFamily Family(std::string name, std::string help,
                                prometheus::MetricType type);
prometheus::ClientMetric CounterMetric(
    double value, std::vector<prometheus::ClientMetric::Label> labels = {});
prometheus::ClientMetric GaugeMetric(
    double value, std::vector<prometheus::ClientMetric::Label> labels = {});
// A Prometheus histogram of `snapshot`: cumulative bucket counts at its
// bounds (in seconds) plus +Inf, sum in seconds.
prometheus::ClientMetric HistogramMetric(
    const LatencyHistogram::Snapshot& snapshot,
    std::vector<prometheus::ClientMetric::Label> labels = {});

// The Prometheus text exposition (format 0.0.4) of `collectable`, exactly
// what /metrics serves. Thread-safe if the collectable is.
std::string SerializeMetrics(const prometheus::Collectable& collectable);

}  // namespace cgacct

#endif  // CGACCT_SERVER_METRICS_PROMETHEUS_FAMILIES_H_
