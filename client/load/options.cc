#include "client/load/options.h"

#include <cstdint>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_split.h"
#include "client/cli/cli_util.h"
#include "client/cli/wire_names.h"

// Every scenario.
ABSL_FLAG(std::string, target, "127.0.0.1:50051",
          "cgacctd gRPC address, or several separated by ',' (a cluster's "
          "nodes: the workers' connections go to them in turn; the first sets "
          "up the groups and its /metrics is scraped)");
ABSL_FLAG(std::string, metrics_target, "",
          "HOST:PORT of cgacctd's /metrics (loopback only); default: the "
          "--target host with port 9464");
ABSL_FLAG(std::string, scenario, "stat-reader",
          "stat-reader | hog | seed-rstat | reclaim | netperf "
          "(client/load/netperf.h) | session-churn "
          "(client/load/session_churn.h)");
ABSL_FLAG(std::string, group, "/cgacct-load",
          "test group; created if missing and left in place");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10), "how long to run");
ABSL_FLAG(std::string, json, "", "also write the report as JSON to this file");
ABSL_FLAG(std::string, chart, "",
          "also plot latency over time (p50/p99 per second) and the "
          "percentile distribution to this PNG (runs gnuplot)");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(5),
          "how long to wait for the server to accept connections");
ABSL_FLAG(absl::Duration, rpc_timeout, absl::Seconds(5),
          "deadline of every RPC");

// stat-reader, hog, seed-rstat, reclaim.
ABSL_FLAG(int32_t, threads, 8,
          "stat readers, each one GetStats call in flight at a time on its "
          "own connection (stat-reader, seed-rstat)");
ABSL_FLAG(int32_t, hogs, 8, "memory hog workers (hog, seed-rstat)");
ABSL_FLAG(double, rate, 0,
          "open loop: GetStats calls per second in total, spread evenly over "
          "the stat readers, latency measured from each call's intended send "
          "time (wrk2's model); 0: closed loop");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(1),
          "run this long before measuring; excluded from every figure");
ABSL_FLAG(int32_t, writers, 4, "FILE page writers (reclaim)");
ABSL_FLAG(cgacct::cli::ByteSize, high_bytes, cgacct::cli::ByteSize{32 << 20},
          "memory.high of --group (reclaim)");
ABSL_FLAG(uint64_t, write_chunk_pages, 16, "FILE pages per Charge (reclaim)");
ABSL_FLAG(cgacct::cli::ByteSize, reclaim_bytes, cgacct::cli::ByteSize{4 << 20},
          "bytes per Reclaim (memory.reclaim) call (reclaim)");
ABSL_FLAG(absl::Duration, reclaim_interval, absl::Milliseconds(100),
          "time between two Reclaim calls (reclaim)");
ABSL_FLAG(cgacct::cli::ByteSize, hog_max_bytes, cgacct::cli::ByteSize{64 << 20},
          "memory.max of --group for hog scenarios (\"max\", 64M, 1G ...)");
ABSL_FLAG(uint64_t, hog_chunk_pages, 64,
          "ANON pages per hog Charge call; a refused charge of <= 8 pages "
          "counts as an OOM kill, of more as a costly ENOMEM (no OOM)");
ABSL_FLAG(std::string, hog_cpus, "all",
          "per-CPU slots the hogs charge through (hog, seed-rstat): all "
          "(each hog moves to its next CPU after every charge, so every "
          "modelled CPU gets updates) or N (N slots spread over the server's "
          "CPUs; N = --hogs keeps each hog on a slot of its own)");
ABSL_FLAG(std::string, flush, "exact",
          "GetStats flush mode: exact | threshold | none");
ABSL_FLAG(int32_t, channels, 0,
          "gRPC connections shared round-robin by the workers; 0: one per "
          "worker");
ABSL_FLAG(int32_t, io_threads, 1,
          "closed loop: threads driving the stat readers' asynchronous calls "
          "(shared round-robin); 0: a blocking thread per reader. Open loop "
          "(--rate) always runs a thread per reader");

// netperf.
ABSL_FLAG(int32_t, streams, 4, "netperf: concurrent streams (connections)");
ABSL_FLAG(uint64_t, pages, 3, "netperf: pages per charge and per uncharge");
ABSL_FLAG(int32_t, batch, 64,
          "netperf: ops per ChargeStream/ChargeBatch message (even: charge, "
          "uncharge pairs)");
ABSL_FLAG(std::string, rpc, "stream",
          "netperf: stream (ChargeStream) | batch (unary ChargeBatch) | unary "
          "(Charge and Uncharge) | library (cgacct::client: one session, "
          "--streams threads charging through its per-CPU stock)");
ABSL_FLAG(std::string, hierarchy, "root",
          "netperf: root (GROUP, directly under /) | deep (GROUP/mid/leaf, "
          "memory.min and memory.low on GROUP)");
ABSL_FLAG(uint64_t, resident_pages, 256,
          "netperf: pages each stream keeps charged during the run");
ABSL_FLAG(cgacct::cli::ByteSize, protection_bytes, cgacct::cli::ByteSize{0},
          "netperf --hierarchy=deep: memory.min = memory.low of GROUP; 0 = "
          "half of all streams' resident pages");

// session-churn.
ABSL_FLAG(int32_t, churn_clients, 4,
          "session-churn: client processes per round (half SIGKILLed, half "
          "exiting without CloseSession)");
ABSL_FLAG(int32_t, churn_rounds, 3, "session-churn: rounds");
ABSL_FLAG(uint64_t, churn_pages, 300,
          "session-churn: pages each client holds when it dies");
ABSL_FLAG(uint32_t, session_ttl_ms, 1000,
          "session-churn: each client's session lease (OpenSession ttl_ms)");
ABSL_FLAG(bool, session_churn_child, false,
          "internal: run as a session-churn client process");

namespace cgacct::load {
namespace {

// --metrics_target, or the --target host with the default metrics port;
// "" when --target is not a plain HOST:PORT (not fatal: the reports then
// say n/a for the server-side numbers).
std::string MetricsTarget(const std::string& target) {
  std::string metrics = absl::GetFlag(FLAGS_metrics_target);
  if (!metrics.empty()) return metrics;
  absl::StatusOr<std::string> derived = cli::MetricsTargetFor(target);
  return derived.ok() ? *derived : "";
}

// The scenarios that make child groups of --group need one below the root.
// --target: one HOST:PORT or several, comma-separated (a cluster's nodes).
absl::Status SetTargets(std::vector<std::string>* targets,
                        std::string* first) {
  const std::string flag = absl::GetFlag(FLAGS_target);
  targets->clear();
  for (absl::string_view t : absl::StrSplit(flag, ',')) {
    t = absl::StripAsciiWhitespace(t);
    if (t.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--target=", flag,
          ": an empty address (one HOST:PORT, or several separated by ',')"));
    }
    targets->emplace_back(t);
  }
  *first = targets->front();
  return absl::OkStatus();
}

absl::Status CheckGroupBelowRoot(const std::string& group) {
  if (group.empty() || group.front() != '/' || group == "/") {
    return absl::InvalidArgumentError(
        "--group must be an absolute path below /");
  }
  return absl::OkStatus();
}

absl::Status CheckDuration(absl::Duration duration) {
  if (duration <= absl::ZeroDuration() || duration > absl::Hours(24)) {
    return absl::InvalidArgumentError("--duration must be in (0, 24h]");
  }
  return absl::OkStatus();
}

// Sets o->readers, hogs and writers from --scenario.
absl::Status SetWorkerCounts(LoadOptions* o) {
  const int threads = absl::GetFlag(FLAGS_threads);
  const int hogs = absl::GetFlag(FLAGS_hogs);
  if (o->scenario == "stat-reader") {
    o->readers = threads;
  } else if (o->scenario == "hog") {
    o->hogs = hogs;
  } else if (o->scenario == "seed-rstat") {
    o->readers = threads;
    o->hogs = hogs;
  } else if (o->scenario == "reclaim") {
    o->writers = absl::GetFlag(FLAGS_writers);
    if (o->writers < 1 || o->writers > 4096) {
      return absl::InvalidArgumentError("--writers must be in 1..4096");
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--scenario=", o->scenario,
                     ": expected stat-reader, hog, seed-rstat or reclaim"));
  }
  // Bounded: a few thousand threads at most, a day at most.
  if (threads < 1 || threads > 4096) {
    return absl::InvalidArgumentError("--threads must be in 1..4096");
  }
  if (hogs < 1 || hogs > 4096) {
    return absl::InvalidArgumentError("--hogs must be in 1..4096");
  }
  return absl::OkStatus();
}

// --duration, --warmup, --rate, --json, --chart.
absl::Status SetTiming(LoadOptions* o) {
  o->duration = absl::GetFlag(FLAGS_duration);
  if (absl::Status s = CheckDuration(o->duration); !s.ok()) return s;
  o->warmup = absl::GetFlag(FLAGS_warmup);
  if (o->warmup < absl::ZeroDuration() || o->warmup > absl::Hours(1)) {
    return absl::InvalidArgumentError("--warmup must be in [0, 1h]");
  }
  o->rate = absl::GetFlag(FLAGS_rate);
  if (!(o->rate >= 0 && o->rate <= 1e7)) {
    return absl::InvalidArgumentError(
        "--rate must be in [0, 10000000] calls/s (0: closed loop)");
  }
  if (o->rate > 0 && o->readers == 0) {
    return absl::InvalidArgumentError(
        "--rate paces the stat readers: use it with --scenario=stat-reader "
        "or seed-rstat");
  }
  o->json_path = absl::GetFlag(FLAGS_json);
  o->chart_path = absl::GetFlag(FLAGS_chart);
  return absl::OkStatus();
}

// The reclaim scenario's writers and reclaimer.
absl::Status SetReclaim(LoadOptions* o) {
  o->high_bytes = absl::GetFlag(FLAGS_high_bytes).bytes;
  o->write_chunk_pages = absl::GetFlag(FLAGS_write_chunk_pages);
  if (o->write_chunk_pages == 0 || o->write_chunk_pages > (1u << 20)) {
    return absl::InvalidArgumentError(
        "--write_chunk_pages must be in 1..1048576");
  }
  o->reclaim_bytes = absl::GetFlag(FLAGS_reclaim_bytes).bytes;
  if (o->writers > 0 &&
      (o->reclaim_bytes == 0 || o->reclaim_bytes == UINT64_MAX)) {
    return absl::InvalidArgumentError(
        "--reclaim_bytes must be a positive size");
  }
  o->reclaim_interval = absl::GetFlag(FLAGS_reclaim_interval);
  if (o->reclaim_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--reclaim_interval must be positive");
  }
  return absl::OkStatus();
}

// --group and the hogs' options.
absl::Status SetGroupAndHogs(LoadOptions* o) {
  o->group = absl::GetFlag(FLAGS_group);
  if (o->group.empty() || o->group.front() != '/') {
    return absl::InvalidArgumentError("--group must be an absolute path");
  }
  if ((o->hogs > 0 || o->writers > 0) && o->group == "/") {
    return absl::InvalidArgumentError(
        "--group=/ cannot take a memory.max or memory.high; use a child "
        "group for hogs and writers");
  }
  o->hog_max_bytes = absl::GetFlag(FLAGS_hog_max_bytes).bytes;
  o->hog_chunk_pages = absl::GetFlag(FLAGS_hog_chunk_pages);
  if (o->hog_chunk_pages == 0 || o->hog_chunk_pages > (1u << 20)) {
    return absl::InvalidArgumentError(
        "--hog_chunk_pages must be in 1..1048576");
  }
  if (const std::string hog_cpus = absl::GetFlag(FLAGS_hog_cpus);
      hog_cpus != "all" && (!absl::SimpleAtoi(hog_cpus, &o->hog_cpus) ||
                            o->hog_cpus < 1 || o->hog_cpus > 4096)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--hog_cpus=", hog_cpus, ": expected all or a number in 1..4096"));
  }
  return absl::OkStatus();
}

// --flush, --channels, --io_threads, the timeouts.
absl::Status SetTransport(LoadOptions* o) {
  o->flush_name = absl::GetFlag(FLAGS_flush);
  const std::optional<v1::FlushMode> flush = cli::ParseFlushMode(o->flush_name);
  if (!flush.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--flush=", o->flush_name, ": expected exact, threshold or none"));
  }
  o->flush = *flush;
  o->channels = absl::GetFlag(FLAGS_channels);
  if (o->channels < 0) {
    return absl::InvalidArgumentError("--channels must be >= 0");
  }
  o->io_threads = absl::GetFlag(FLAGS_io_threads);
  if (o->io_threads < 0 || o->io_threads > 256) {
    return absl::InvalidArgumentError("--io_threads must be in 0..256");
  }
  o->connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  o->rpc_timeout = absl::GetFlag(FLAGS_rpc_timeout);
  if (o->rpc_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--rpc_timeout must be positive");
  }
  return absl::OkStatus();
}

}  // namespace

std::string ScenarioFlag() { return absl::GetFlag(FLAGS_scenario); }

std::string TargetsText(const std::vector<std::string>& targets,
                        const std::string& target) {
  return targets.empty() ? target : absl::StrJoin(targets, ",");
}

absl::StatusOr<LoadOptions> LoadOptionsFromFlags() {
  LoadOptions o;
  if (absl::Status s = SetTargets(&o.targets, &o.target); !s.ok()) return s;
  o.metrics_target = MetricsTarget(o.target);
  o.scenario = absl::GetFlag(FLAGS_scenario);
  // In this order: the first error found is the one reported.
  for (absl::Status (*set)(LoadOptions*) :
       {SetWorkerCounts, SetTiming, SetReclaim, SetGroupAndHogs,
        SetTransport}) {
    if (absl::Status s = set(&o); !s.ok()) return s;
  }
  return o;
}

absl::StatusOr<NetperfOptions> NetperfOptionsFromFlags() {
  NetperfOptions o;
  if (absl::Status s = SetTargets(&o.targets, &o.target); !s.ok()) return s;
  o.group = absl::GetFlag(FLAGS_group);
  o.duration = absl::GetFlag(FLAGS_duration);
  o.json_path = absl::GetFlag(FLAGS_json);
  o.chart_path = absl::GetFlag(FLAGS_chart);
  o.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  o.rpc_timeout = absl::GetFlag(FLAGS_rpc_timeout);
  o.streams = absl::GetFlag(FLAGS_streams);
  o.pages = absl::GetFlag(FLAGS_pages);
  o.batch = absl::GetFlag(FLAGS_batch);
  o.rpc_name = absl::GetFlag(FLAGS_rpc);
  const std::string hierarchy = absl::GetFlag(FLAGS_hierarchy);
  o.resident_pages = absl::GetFlag(FLAGS_resident_pages);
  o.protection_bytes = absl::GetFlag(FLAGS_protection_bytes).bytes;
  if (absl::Status s = CheckGroupBelowRoot(o.group); !s.ok()) return s;
  if (absl::Status s = CheckDuration(o.duration); !s.ok()) return s;
  if (o.streams < 1 || o.streams > 1024) {
    return absl::InvalidArgumentError("--streams must be in 1..1024");
  }
  if (o.pages < 1 || o.pages > 127) {
    return absl::InvalidArgumentError("--pages must be in 1..127");
  }
  if (o.rpc_name == "stream") {
    o.rpc = RpcKind::kStream;
  } else if (o.rpc_name == "batch") {
    o.rpc = RpcKind::kBatch;
  } else if (o.rpc_name == "unary") {
    o.rpc = RpcKind::kUnary;
    o.batch = 2;
  } else if (o.rpc_name == "library") {
    o.rpc = RpcKind::kLibrary;
    o.metrics_target = MetricsTarget(o.target);
    if (o.targets.size() > 1) {
      return absl::InvalidArgumentError(
          "--target: --rpc=library takes one target (the C++ library does "
          "not route by a cluster's map yet: give one node, which forwards)");
    }
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--rpc=", o.rpc_name, ": expected stream, batch, unary or library"));
  }
  if (o.batch < 2 || o.batch > 4096 || o.batch % 2 != 0) {
    return absl::InvalidArgumentError("--batch must be even, in 2..4096");
  }
  if (hierarchy == "root") {
    o.deep = false;
  } else if (hierarchy == "deep") {
    o.deep = true;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--hierarchy=", hierarchy, ": expected root or deep"));
  }
  if (o.resident_pages > (uint64_t{1} << 30)) {
    return absl::InvalidArgumentError("--resident_pages must be <= 2^30");
  }
  return o;
}

absl::StatusOr<SessionChurnOptions> SessionChurnOptionsFromFlags() {
  SessionChurnOptions o;
  if (absl::Status s = SetTargets(&o.targets, &o.target); !s.ok()) return s;
  o.metrics_target = MetricsTarget(o.target);
  o.group = absl::GetFlag(FLAGS_group);
  o.json_path = absl::GetFlag(FLAGS_json);
  o.clients = absl::GetFlag(FLAGS_churn_clients);
  o.rounds = absl::GetFlag(FLAGS_churn_rounds);
  o.pages = absl::GetFlag(FLAGS_churn_pages);
  o.ttl_ms = absl::GetFlag(FLAGS_session_ttl_ms);
  o.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  o.rpc_timeout = absl::GetFlag(FLAGS_rpc_timeout);
  if (absl::Status s = CheckGroupBelowRoot(o.group); !s.ok()) return s;
  if (o.clients < 1 || o.clients > 256) {
    return absl::InvalidArgumentError("--churn_clients must be in 1..256");
  }
  if (o.rounds < 1 || o.rounds > 1000) {
    return absl::InvalidArgumentError("--churn_rounds must be in 1..1000");
  }
  if (o.pages < 1 || o.pages > (uint64_t{1} << 24)) {
    return absl::InvalidArgumentError("--churn_pages must be in 1..2^24");
  }
  return o;
}

bool IsSessionChurnChild() { return absl::GetFlag(FLAGS_session_churn_child); }

}  // namespace cgacct::load
