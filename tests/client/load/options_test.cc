// cgacct-load's flags into its typed options (client/load/options.h): the
// scenario's workers, defaults, derived values, and each range check's
// message, in the order they are checked.
#include "client/load/options.h"

#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cli/cli_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(std::string, target);
ABSL_DECLARE_FLAG(std::string, metrics_target);
ABSL_DECLARE_FLAG(std::string, scenario);
ABSL_DECLARE_FLAG(std::string, group);
ABSL_DECLARE_FLAG(absl::Duration, duration);
ABSL_DECLARE_FLAG(int32_t, threads);
ABSL_DECLARE_FLAG(int32_t, hogs);
ABSL_DECLARE_FLAG(int32_t, writers);
ABSL_DECLARE_FLAG(double, rate);
ABSL_DECLARE_FLAG(std::string, hog_cpus);
ABSL_DECLARE_FLAG(std::string, flush);
ABSL_DECLARE_FLAG(cgacct::cli::ByteSize, reclaim_bytes);
ABSL_DECLARE_FLAG(int32_t, io_threads);
ABSL_DECLARE_FLAG(std::string, rpc);
ABSL_DECLARE_FLAG(int32_t, batch);
ABSL_DECLARE_FLAG(std::string, hierarchy);
ABSL_DECLARE_FLAG(int32_t, streams);
ABSL_DECLARE_FLAG(int32_t, churn_clients);
ABSL_DECLARE_FLAG(uint64_t, churn_pages);

namespace cgacct::load {
namespace {

// The message of a refused set of flags ("" when they are accepted).
template <typename T>
std::string Error(const absl::StatusOr<T>& o) {
  if (o.ok()) return "";
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(o.status().message());
}

class LoadOptionsTest : public ::testing::Test {
 private:
  absl::FlagSaver saver_;  // every test starts from the defaults
};

TEST_F(LoadOptionsTest, DefaultsAreEightClosedLoopStatReaders) {
  absl::StatusOr<LoadOptions> o = LoadOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->scenario, "stat-reader");
  EXPECT_EQ(o->readers, 8);
  EXPECT_EQ(o->hogs, 0);
  EXPECT_EQ(o->writers, 0);
  EXPECT_EQ(o->rate, 0);
  EXPECT_EQ(o->group, "/cgacct-load");
  EXPECT_EQ(o->flush, v1::FLUSH_MODE_EXACT);
  EXPECT_EQ(o->hog_cpus, 0);  // all
  EXPECT_EQ(o->io_threads, 1);
  EXPECT_EQ(o->duration, absl::Seconds(10));
  EXPECT_EQ(o->warmup, absl::Seconds(1));
  // The metrics endpoint is the target's host on 9464.
  EXPECT_EQ(o->metrics_target, "127.0.0.1:9464");
}

TEST_F(LoadOptionsTest, TheScenarioDecidesTheWorkers) {
  absl::SetFlag(&FLAGS_threads, 3);
  absl::SetFlag(&FLAGS_hogs, 5);
  absl::SetFlag(&FLAGS_writers, 2);
  const struct {
    const char* scenario;
    int readers, hogs, writers;
  } cases[] = {{"stat-reader", 3, 0, 0},
               {"hog", 0, 5, 0},
               {"seed-rstat", 3, 5, 0},
               {"reclaim", 0, 0, 2}};
  for (const auto& c : cases) {
    absl::SetFlag(&FLAGS_scenario, c.scenario);
    absl::StatusOr<LoadOptions> o = LoadOptionsFromFlags();
    ASSERT_TRUE(o.ok()) << c.scenario << ": " << o.status();
    EXPECT_EQ(o->readers, c.readers) << c.scenario;
    EXPECT_EQ(o->hogs, c.hogs) << c.scenario;
    EXPECT_EQ(o->writers, c.writers) << c.scenario;
  }
}

TEST_F(LoadOptionsTest, TheFirstProblemIsTheOneReported) {
  absl::SetFlag(&FLAGS_scenario, "nap");
  absl::SetFlag(&FLAGS_threads, 0);
  EXPECT_EQ(Error(LoadOptionsFromFlags()),
            "--scenario=nap: expected stat-reader, hog, seed-rstat or reclaim");
  absl::SetFlag(&FLAGS_scenario, "hog");
  EXPECT_EQ(Error(LoadOptionsFromFlags()), "--threads must be in 1..4096");
  absl::SetFlag(&FLAGS_threads, 1);
  absl::SetFlag(&FLAGS_duration, absl::ZeroDuration());
  EXPECT_EQ(Error(LoadOptionsFromFlags()), "--duration must be in (0, 24h]");
}

TEST_F(LoadOptionsTest, RateOpensTheLoopOfStatReadersOnly) {
  absl::SetFlag(&FLAGS_rate, 500.0);
  absl::StatusOr<LoadOptions> o = LoadOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rate, 500);
  absl::SetFlag(&FLAGS_scenario, "hog");
  EXPECT_EQ(Error(LoadOptionsFromFlags()),
            "--rate paces the stat readers: use it with "
            "--scenario=stat-reader or seed-rstat");
  absl::SetFlag(&FLAGS_rate, -1.0);
  EXPECT_EQ(Error(LoadOptionsFromFlags()),
            "--rate must be in [0, 10000000] calls/s (0: closed loop)");
}

TEST_F(LoadOptionsTest, TheRootTakesReadersButNoHogsOrWriters) {
  absl::SetFlag(&FLAGS_group, "/");
  EXPECT_TRUE(LoadOptionsFromFlags().ok());
  absl::SetFlag(&FLAGS_scenario, "reclaim");
  EXPECT_EQ(Error(LoadOptionsFromFlags()),
            "--group=/ cannot take a memory.max or memory.high; use a child "
            "group for hogs and writers");
  absl::SetFlag(&FLAGS_group, "relative");
  EXPECT_EQ(Error(LoadOptionsFromFlags()), "--group must be an absolute path");
}

TEST_F(LoadOptionsTest, HogCpusIsAllOrACount) {
  absl::SetFlag(&FLAGS_scenario, "hog");
  absl::SetFlag(&FLAGS_hog_cpus, "16");
  absl::StatusOr<LoadOptions> o = LoadOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->hog_cpus, 16);
  for (const char* bad : {"0", "4097", "some", ""}) {
    absl::SetFlag(&FLAGS_hog_cpus, bad);
    EXPECT_EQ(Error(LoadOptionsFromFlags()),
              std::string("--hog_cpus=") + bad +
                  ": expected all or a number in 1..4096");
  }
}

TEST_F(LoadOptionsTest, FlushModesByName) {
  absl::SetFlag(&FLAGS_flush, "threshold");
  absl::StatusOr<LoadOptions> o = LoadOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->flush, v1::FLUSH_MODE_THRESHOLD);
  EXPECT_EQ(o->flush_name, "threshold");
  absl::SetFlag(&FLAGS_flush, "lazy");
  EXPECT_EQ(Error(LoadOptionsFromFlags()),
            "--flush=lazy: expected exact, threshold or none");
}

TEST_F(LoadOptionsTest, ReclaimNeedsAPositiveSize) {
  absl::SetFlag(&FLAGS_scenario, "reclaim");
  absl::SetFlag(&FLAGS_reclaim_bytes, cli::ByteSize{UINT64_MAX});
  EXPECT_EQ(Error(LoadOptionsFromFlags()),
            "--reclaim_bytes must be a positive size");
  // Without writers the size is not used.
  absl::SetFlag(&FLAGS_scenario, "stat-reader");
  EXPECT_TRUE(LoadOptionsFromFlags().ok());
}

TEST_F(LoadOptionsTest, MetricsTargetGivenOrDerivedOrNone) {
  absl::SetFlag(&FLAGS_target, "[::1]:7000");
  EXPECT_EQ(LoadOptionsFromFlags()->metrics_target, "[::1]:9464");
  absl::SetFlag(&FLAGS_metrics_target, "localhost:1234");
  EXPECT_EQ(LoadOptionsFromFlags()->metrics_target, "localhost:1234");
  absl::SetFlag(&FLAGS_metrics_target, "");
  absl::SetFlag(&FLAGS_target, "unix:/run/cgacct.sock");
  EXPECT_EQ(LoadOptionsFromFlags()->metrics_target, "");
}

// Several targets (a cluster's nodes, issue 23): in order, the first sets
// up the groups and gives the metrics target; an empty one is refused;
// the connections go to them in turn; the report shows them all.
TEST_F(LoadOptionsTest, SeveralTargetsInTurn) {
  absl::SetFlag(&FLAGS_target, "127.0.0.1:7001, 127.0.0.1:7002,[::1]:7003");
  absl::StatusOr<LoadOptions> o = LoadOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_THAT(o->targets, ::testing::ElementsAre("127.0.0.1:7001",
                                                 "127.0.0.1:7002", "[::1]:7003"));
  EXPECT_EQ(o->target, "127.0.0.1:7001");
  EXPECT_EQ(o->metrics_target, "127.0.0.1:9464");
  EXPECT_EQ(TargetFor(o->targets, o->target, 0), "127.0.0.1:7001");
  EXPECT_EQ(TargetFor(o->targets, o->target, 4), "127.0.0.1:7002");
  EXPECT_EQ(TargetsText(o->targets, o->target),
            "127.0.0.1:7001,127.0.0.1:7002,[::1]:7003");
  absl::SetFlag(&FLAGS_target, "127.0.0.1:7001,,127.0.0.1:7002");
  EXPECT_THAT(Error(LoadOptionsFromFlags()),
              ::testing::HasSubstr("an empty address"));
  absl::SetFlag(&FLAGS_target, "127.0.0.1:7001,127.0.0.1:7002");
  absl::SetFlag(&FLAGS_rpc, "library");
  EXPECT_THAT(Error(NetperfOptionsFromFlags()),
              ::testing::HasSubstr("--rpc=library takes one target"));
  absl::SetFlag(&FLAGS_rpc, "stream");
  EXPECT_EQ(NetperfOptionsFromFlags()->targets.size(), 2u);
  EXPECT_EQ(SessionChurnOptionsFromFlags()->targets.size(), 2u);
}

TEST_F(LoadOptionsTest, IoThreadsBounded) {
  absl::SetFlag(&FLAGS_io_threads, 257);
  EXPECT_EQ(Error(LoadOptionsFromFlags()), "--io_threads must be in 0..256");
}

class NetperfOptionsTest : public ::testing::Test {
 private:
  absl::FlagSaver saver_;
};

TEST_F(NetperfOptionsTest, DefaultsAreFourChargeStreams) {
  absl::StatusOr<NetperfOptions> o = NetperfOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rpc, RpcKind::kStream);
  EXPECT_EQ(o->streams, 4);
  EXPECT_EQ(o->pages, 3u);
  EXPECT_EQ(o->batch, 64);
  EXPECT_FALSE(o->deep);
  EXPECT_EQ(o->resident_pages, 256u);
  EXPECT_EQ(o->metrics_target, "");  // only --rpc=library scrapes
}

TEST_F(NetperfOptionsTest, UnaryIsOneChargeAndOneUnchargePerRound) {
  absl::SetFlag(&FLAGS_rpc, "unary");
  absl::SetFlag(&FLAGS_batch, 7);  // ignored: unary sends pairs
  absl::StatusOr<NetperfOptions> o = NetperfOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rpc, RpcKind::kUnary);
  EXPECT_EQ(o->batch, 2);
}

TEST_F(NetperfOptionsTest, LibraryScrapesTheServersRpcs) {
  absl::SetFlag(&FLAGS_rpc, "library");
  absl::SetFlag(&FLAGS_hierarchy, "deep");
  absl::StatusOr<NetperfOptions> o = NetperfOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->rpc, RpcKind::kLibrary);
  EXPECT_TRUE(o->deep);
  EXPECT_EQ(o->metrics_target, "127.0.0.1:9464");
}

TEST_F(NetperfOptionsTest, Refusals) {
  absl::SetFlag(&FLAGS_batch, 7);
  EXPECT_EQ(Error(NetperfOptionsFromFlags()),
            "--batch must be even, in 2..4096");
  absl::SetFlag(&FLAGS_rpc, "carrier-pigeon");
  EXPECT_EQ(Error(NetperfOptionsFromFlags()),
            "--rpc=carrier-pigeon: expected stream, batch, unary or library");
  absl::SetFlag(&FLAGS_streams, 0);
  EXPECT_EQ(Error(NetperfOptionsFromFlags()), "--streams must be in 1..1024");
  absl::SetFlag(&FLAGS_group, "/");
  EXPECT_EQ(Error(NetperfOptionsFromFlags()),
            "--group must be an absolute path below /");
}

TEST_F(NetperfOptionsTest, HierarchyIsRootOrDeep) {
  absl::SetFlag(&FLAGS_hierarchy, "flat");
  EXPECT_EQ(Error(NetperfOptionsFromFlags()),
            "--hierarchy=flat: expected root or deep");
}

class SessionChurnOptionsTest : public ::testing::Test {
 private:
  absl::FlagSaver saver_;
};

TEST_F(SessionChurnOptionsTest, DefaultsAndBounds) {
  absl::StatusOr<SessionChurnOptions> o = SessionChurnOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->clients, 4);
  EXPECT_EQ(o->rounds, 3);
  EXPECT_EQ(o->pages, 300u);
  EXPECT_EQ(o->ttl_ms, 1000u);
  absl::SetFlag(&FLAGS_churn_pages, uint64_t{0});
  EXPECT_EQ(Error(SessionChurnOptionsFromFlags()),
            "--churn_pages must be in 1..2^24");
  absl::SetFlag(&FLAGS_churn_clients, 257);
  EXPECT_EQ(Error(SessionChurnOptionsFromFlags()),
            "--churn_clients must be in 1..256");
  EXPECT_FALSE(IsSessionChurnChild());
}

}  // namespace
}  // namespace cgacct::load
