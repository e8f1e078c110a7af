// "Memory grows without bound and is not returned": 300 ChargeStreams that
// each send one ~4 MB batch of missing paths and then idle, then close.
// Runs the real cgacctd and reads its VmRSS from /proc. Checks that the
// daemon's RSS is back under 2x its idle RSS within 10 s of the streams
// closing and their clients disconnecting (issue 11's goal), and prints the
// figures. ctest label "slow".
//
// Also: 2,000 ChargeStreams that each send one message that is not protobuf
// (now INVALID_ARGUMENT) do not grow the daemon's RSS. This passes on the
// code before the change too: the ~27-34 KB per such stream that
// request_fuzzer saw is gRPC 1.51's in-process transport (a stream the
// server ends before the client half-closes, with any status: 2,000 streams
// +50-54 MB in-process, old and new code alike; +0.1 MB over TCP, old and
// new), see docs/DESIGN.md §4.10.
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/support/sync_stream.h>
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cgacct/v1/accounting.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/rpc/receive_guard.h"
#include "tests/server/http_get.h"

extern char** environ;

namespace cgacct {
namespace {

namespace v1 = ::cgacct::v1;

constexpr int kStreams = 300;
constexpr int kChannels = 10;  // 30 streams each, under 100 per connection
constexpr int kOpsPerBatch = 4096;
constexpr int kPathBytes = 1000;  // 4096 x ~1 KB = ~4 MB per batch

long RssKb(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// A bidi stream of raw messages on `method` (the wire of any of the
// service's methods: a unary one's too).
std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>
RawStream(grpc::Channel& channel, const char* method,
          grpc::ClientContext* context) {
  return std::unique_ptr<
      grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer,
                                                grpc::ByteBuffer>::
          Create(&channel,
                 grpc::internal::RpcMethod(
                     method, grpc::internal::RpcMethod::BIDI_STREAMING),
                 context));
}

// One tenant, "a", by token, in a temporary directory removed at the end.
struct TokenFiles {
  TokenFiles() {
    char dir_template[] = "/tmp/cgacct-memory-XXXXXX";
    if (mkdtemp(dir_template) != nullptr) dir = dir_template;
    std::ofstream(dir + "/tokens") << "a " << token << "\n";
    std::ofstream(dir + "/policy") << "token:a rw /tenants/a\n";
  }
  ~TokenFiles() {
    std::remove((dir + "/tokens").c_str());
    std::remove((dir + "/policy").c_str());
    rmdir(dir.c_str());
  }
  std::string tokens_flag() const { return "--tokens_file=" + dir + "/tokens"; }
  std::string policy_flag() const {
    return "--authz_policy=" + dir + "/policy";
  }
  std::string dir;
  const std::string token = "aaaaaaaaaaaaaaaaaaaaaaaa-tokenA";
};

// SIGTERM to the daemon `pid`; it must exit 0.
void ExpectCleanExitOnSigterm(pid_t pid) {
  kill(pid, SIGTERM);
  int status = 0;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

#if defined(__SANITIZE_ADDRESS__)
#define CGACCT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CGACCT_ASAN 1
#endif
#endif

TEST(MemoryReturnTest, RssBackUnderTwiceIdleAfter300BigStreamsClose) {
#ifdef CGACCT_ASAN
  // Under AddressSanitizer the RSS is its allocator's (quarantine, shadow
  // memory, no malloc_trim): 494 MB 10 s after the streams closed, against
  // 33 MB idle. What this test measures is glibc's, in the g++ build.
  GTEST_SKIP() << "RSS under AddressSanitizer is not cgacctd's";
#endif
  // The daemon, with its stdout on a pipe for the start line.
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  // MEMORY_TEST_CGACCTD=path runs another build's daemon (one without the
  // stream limit flag), to compare.
  const char* other = getenv("MEMORY_TEST_CGACCTD");
  const std::string binary = other != nullptr ? other : CGACCTD_PATH;
  std::vector<std::string> args = {binary, "--listen=127.0.0.1:0",
                                   "--metrics_listen=", "--cpus=2"};
  if (other == nullptr) args.push_back("--max_streams_per_identity=0");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, binary.c_str(), &actions, nullptr, argv.data(),
                        environ),
            0);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  std::string line;
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n') line.push_back(c);
  close(out[0]);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(line, m, std::regex(R"(127\.0\.0\.1:(\d+))")))
      << line;
  const std::string target = absl::StrCat("127.0.0.1:", m[1].str());

  std::vector<std::shared_ptr<grpc::Channel>> channels;
  std::vector<std::unique_ptr<v1::Accounting::Stub>> stubs;
  for (int i = 0; i < kChannels; ++i) {
    grpc::ChannelArguments channel_args;
    channel_args.SetInt("grpc.channel_id", i);  // one connection each
    channels.push_back(grpc::CreateCustomChannel(
        target, grpc::InsecureChannelCredentials(), channel_args));
    stubs.push_back(v1::Accounting::NewStub(channels.back()));
  }
  {
    v1::EngineInfo info;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    ASSERT_TRUE(stubs[0]
                    ->GetEngineInfo(&context, v1::GetEngineInfoRequest(), &info)
                    .ok());
  }
  // Every channel connected before the load, and the streams wait for
  // their channel to be ready rather than failing at once: under a full
  // parallel ctest one channel's first connection attempt failed now and
  // then (the clean-clone CI of d2175b5: "failed to connect to all
  // addresses", every stream of one of the 10 channels), and gRPC then
  // failed its streams fast through the reconnect backoff. The streams are
  // what this test measures, not the connection's first attempt.
  for (int i = 0; i < kChannels; ++i) {
    ASSERT_TRUE(channels[i]->WaitForConnected(std::chrono::system_clock::now() +
                                              std::chrono::seconds(20)))
        << "channel " << i;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const long idle_kb = RssKb(pid);

  v1::ChargeBatchRequest batch;
  for (int i = 0; i < kOpsPerBatch; ++i) {
    v1::ChargeOp* op = batch.add_ops();
    op->set_path(
        absl::StrCat("/missing-", i, "/", std::string(kPathBytes - 20, 'x')));
    op->set_nr_pages(1);
    op->set_kind(v1::PAGE_KIND_ANON);
  }
  std::printf("batch: %zu bytes\n", batch.ByteSizeLong());

  struct Stream {
    std::unique_ptr<grpc::ClientContext> context;
    std::unique_ptr<grpc::ClientReaderWriter<v1::ChargeBatchRequest,
                                             v1::ChargeBatchResponse>>
        rw;
  };
  std::vector<Stream> streams(kStreams);
  const auto load_start = std::chrono::steady_clock::now();
  std::vector<std::thread> senders;
  for (int t = 0; t < kChannels; ++t) {
    senders.emplace_back([&, t] {
      for (int i = t; i < kStreams; i += kChannels) {
        Stream& s = streams[i];
        s.context = std::make_unique<grpc::ClientContext>();
        s.context->set_wait_for_ready(true);
        s.rw = stubs[t]->ChargeStream(s.context.get());
        v1::ChargeBatchResponse response;
        if (!s.rw->Write(batch) || !s.rw->Read(&response)) {
          // Why the stream ended (it failed 2 runs in many under a full
          // parallel ctest, never alone): its status, for the next time.
          const grpc::Status st = s.rw->Finish();
          ADD_FAILURE() << "stream " << i << " ended: code "
                        << st.error_code() << ": " << st.error_message();
          s.rw.reset();
          continue;
        }
        EXPECT_EQ(response.results_size(), kOpsPerBatch);
      }
    });
  }
  for (std::thread& t : senders) t.join();
  const double load_s = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - load_start)
                            .count();
  const long loaded_kb = RssKb(pid);  // 300 idle streams, each served once

  for (Stream& s : streams) {
    if (s.rw == nullptr) continue;  // failed above
    s.rw->WritesDone();
    EXPECT_TRUE(s.rw->Finish().ok());
  }
  streams.clear();
  // Streams closed, their 10 connections still open: reported, not checked
  // (each open HTTP/2 connection keeps its grown transport buffers, ~2-3
  // MB each here).
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const long streams_closed_kb = RssKb(pid);
  // The clients go away.
  stubs.clear();
  channels.clear();
  const auto closed = std::chrono::steady_clock::now();
  long after_kb = RssKb(pid);
  double back_s = -1;
  while (std::chrono::steady_clock::now() - closed < std::chrono::seconds(10)) {
    after_kb = RssKb(pid);
    if (after_kb < 2 * idle_kb) {
      back_s = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                             closed)
                   .count();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::printf(
      "RSS: idle %ld KiB; 300 idle streams after one ~4 MB batch each %ld "
      "KiB (load %.1f s); streams closed, connections open (3 s) %ld KiB; "
      "connections closed: %s %ld KiB %.1f s after\n",
      idle_kb, loaded_kb, load_s, streams_closed_kb,
      back_s >= 0 ? "back under 2x idle:" : "NOT under 2x idle after 10 s:",
      after_kb, back_s >= 0 ? back_s : 10.0);
  EXPECT_GE(back_s, 0) << "RSS " << after_kb << " KiB, idle " << idle_kb;

  ExpectCleanExitOnSigterm(pid);
}

// The port of "`what` 127.0.0.1:PORT" in cgacctd's start line, 0 if none.
int PortAfter(const std::string& line, const std::string& what) {
  std::smatch m;
  if (!std::regex_search(line, m,
                         std::regex(what + R"( 127\.0\.0\.1:(\d+))")))
    return 0;
  return std::stoi(m[1].str());
}

// Spawns the daemon under test (MEMORY_TEST_CGACCTD=path: another build's)
// on 127.0.0.1 port 0 with `flags`; *pid gets its pid. Returns its address,
// "" on failure.
std::string SpawnDaemon(const std::vector<std::string>& flags, pid_t* pid,
                        std::string* start_line = nullptr) {
  int out[2];
  if (pipe(out) != 0) return "";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  posix_spawn_file_actions_addclose(&actions, out[0]);
  const char* other = getenv("MEMORY_TEST_CGACCTD");
  const std::string binary = other != nullptr ? other : CGACCTD_PATH;
  std::vector<std::string> args = {binary, "--listen=127.0.0.1:0",
                                   "--metrics_listen="};
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int spawned =
      posix_spawn(pid, binary.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(out[1]);
  std::string line;
  char c;
  while (spawned == 0 && read(out[0], &c, 1) == 1 && c != '\n') {
    line.push_back(c);
  }
  close(out[0]);
  if (start_line != nullptr) *start_line = line;
  std::smatch m;
  // (A --listen=[::1]:0 among `flags` overrides the first.)
  if (!std::regex_search(line, m,
                         std::regex(R"((127\.0\.0\.1|\[::1\]):(\d+))"))) {
    return "";
  }
  return absl::StrCat(m[1].str(), ":", m[2].str());
}

TEST(MemoryReturnTest, UndecodableStreamMessagesDoNotGrowRss) {
#ifdef CGACCT_ASAN
  GTEST_SKIP() << "RSS under AddressSanitizer is not cgacctd's";
#endif
  constexpr int kWarmup = 200;
  constexpr int kBadStreams = 2000;
  // Bound on growth: 2,000 streams at the ~34 KB each they used to keep
  // would be ~66 MiB.
  constexpr long kMaxGrowthKb = 16 * 1024;
  pid_t pid = -1;
  const std::string target = SpawnDaemon({"--cpus=2"}, &pid);
  ASSERT_FALSE(target.empty());
  std::vector<std::shared_ptr<grpc::Channel>> channels;
  for (int i = 0; i < kChannels; ++i) {
    grpc::ChannelArguments channel_args;
    channel_args.SetInt("grpc.channel_id", i);  // one connection each
    channels.push_back(grpc::CreateCustomChannel(
        target, grpc::InsecureChannelCredentials(), channel_args));
  }
  grpc::Slice garbage_slice(std::string("\xff\xff\xff\xff", 4));
  const grpc::ByteBuffer garbage(&garbage_slice, 1);
  std::atomic<int> not_ok{0};
  // `n` streams over the channels, each: one undecodable message,
  // half-close, read the end.
  auto run = [&](int n) {
    std::vector<std::thread> threads;
    for (int t = 0; t < kChannels; ++t) {
      threads.emplace_back([&, t] {
        for (int i = t; i < n; i += kChannels) {
          grpc::ClientContext context;
          context.set_deadline(std::chrono::system_clock::now() +
                               std::chrono::seconds(30));
          auto rw = RawStream(*channels[t],
                              "/cgacct.v1.Accounting/ChargeStream", &context);
          // As request_fuzzer, which found it: the message, a read for its
          // answer, then the half-close.
          rw->Write(garbage);
          grpc::ByteBuffer ignored;
          rw->Read(&ignored);
          rw->WritesDone();
          while (rw->Read(&ignored)) {
          }
          if (!rw->Finish().ok()) ++not_ok;
        }
      });
    }
    for (std::thread& t : threads) t.join();
  };
  run(kWarmup);  // gRPC's own per-connection and per-thread caches
  std::this_thread::sleep_for(std::chrono::seconds(2));  // a trim pass
  const long before_kb = RssKb(pid);
  const auto start = std::chrono::steady_clock::now();
  run(kBadStreams);
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const long after_kb = RssKb(pid);
  std::printf(
      "RSS: %ld KiB after %d warm-up streams; %ld KiB 2 s after %d more "
      "streams of one undecodable message each (%.1f s; %d ended not OK), "
      "connections open: %+ld KiB\n",
      before_kb, kWarmup, after_kb, kBadStreams, load_s, not_ok.load(),
      after_kb - before_kb);
  EXPECT_LT(after_kb - before_kb, kMaxGrowthKb)
      << "before " << before_kb << " KiB, after " << after_kb << " KiB";
  channels.clear();
  ExpectCleanExitOnSigterm(pid);
}

// Issue 22's row St2: many connections, each churning SessionStreams that
// send a ~4 MB message (refused: a session message is at most 256 KiB, but
// gRPC takes it whole first). No per-identity bound sees this: each
// connection kept the read buffers of its last 4 MB read between reads
// (200 connections: 263 MB median, 381 MB peak). Under a gRPC resource
// quota (--grpc_memory_quota_bytes=268435456 here; off by default, see
// README) gRPC frees them as it fills. Checks the median RSS over the
// churn, prints the peak.
TEST(MemoryReturnTest, ChurningBigSessionMessagesOnManyConnectionsStayBounded) {
#ifdef CGACCT_ASAN
  GTEST_SKIP() << "RSS under AddressSanitizer is not cgacctd's";
#endif
  constexpr int kConnections = 200;
  constexpr auto kChurn = std::chrono::seconds(8);
  // At eae84c2 (no quota) this run's median was 297 MB (peak 346); with
  // a 256 MiB quota 182 MB (peak 204).
  constexpr long kMaxMedianKb = 240 * 1024;
  // One tenant (a token): its session reads are bounded per identity
  // (without access control every caller is one identity, unbounded).
  const TokenFiles files;
  const std::string& token = files.token;
  pid_t pid = -1;
  const std::string target =
      SpawnDaemon({"--cpus=2", files.tokens_flag(), files.policy_flag(),
                   "--grpc_memory_quota_bytes=268435456"},
                  &pid);
  ASSERT_FALSE(target.empty());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const long idle_kb = RssKb(pid);
  v1::SessionClientMessage big_message;
  big_message.set_keepalive(true);
  big_message.add_returned()->set_path(std::string(4000000, 'x'));
  // One slice all streams send (no copy per write).
  grpc::Slice big_slice(big_message.SerializeAsString());
  const grpc::ByteBuffer big(&big_slice, 1);
  std::atomic<bool> stop{false};
  std::atomic<int> refused{0}, other_ends{0}, opens_failed{0};
  std::atomic<int> ends_by_code[17] = {};
  std::vector<std::thread> threads;
  for (int t = 0; t < kConnections; ++t) {
    threads.emplace_back([&, t] {
      grpc::ChannelArguments channel_args;
      channel_args.SetInt("grpc.channel_id", t);  // one connection each
      channel_args.SetMaxSendMessageSize(8 << 20);
      auto channel = grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), channel_args);
      auto stub = v1::Accounting::NewStub(channel);
      while (!stop.load()) {
        v1::OpenSessionRequest open;
        open.set_ttl_ms(300);  // a keepalive is asked for after 100 ms
        v1::OpenSessionResponse opened;
        {
          grpc::ClientContext context;
          context.set_deadline(std::chrono::system_clock::now() +
                               std::chrono::seconds(10));
          context.AddMetadata("authorization", "Bearer " + token);
          if (!stub->OpenSession(&context, open, &opened).ok()) {
            ++opens_failed;
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            continue;
          }
        }
        grpc::ClientContext context;
        context.set_deadline(std::chrono::system_clock::now() +
                             std::chrono::seconds(10));
        context.AddMetadata("authorization", "Bearer " + token);
        auto rw = RawStream(*channel, "/cgacct.v1.Accounting/SessionStream",
                            &context);
        v1::SessionClientMessage attach;
        attach.set_attach_session_id(opened.session_id());
        grpc::Slice attach_slice(attach.SerializeAsString());
        rw->Write(grpc::ByteBuffer(&attach_slice, 1));
        rw->Write(big);  // taken when the server reads for the keepalive
        grpc::ByteBuffer ignored;
        while (rw->Read(&ignored)) {
        }
        const grpc::Status status = rw->Finish();
        ++ends_by_code[std::min(16, static_cast<int>(status.error_code()))];
        if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
          ++refused;
        } else {
          ++other_ends;
        }
      }
    });
  }
  std::vector<long> samples_kb;
  const auto start = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - start < kChurn) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    samples_kb.push_back(RssKb(pid));
  }
  stop = true;
  for (std::thread& t : threads) t.join();
  std::vector<long> sorted = samples_kb;
  std::sort(sorted.begin(), sorted.end());
  const long median_kb = sorted[sorted.size() / 2];
  std::printf(
      "RSS: idle %ld KiB; %d connections churning SessionStreams with one "
      "~4 MB message each for %.0f s: median %ld KiB, peak %ld KiB; %d "
      "streams refused the message, %d ended otherwise, %d opens failed\n",
      idle_kb, kConnections,
      std::chrono::duration<double>(kChurn).count(), median_kb,
      sorted.back(), refused.load(), other_ends.load(), opens_failed.load());
  for (int code = 0; code <= 16; ++code) {
    if (ends_by_code[code].load() != 0)
      std::printf("  streams ended with code %d: %d\n", code,
                  ends_by_code[code].load());
  }
  EXPECT_GT(refused.load(), kConnections) << "the churn did not run";
  EXPECT_LT(median_kb, kMaxMedianKb);
  ExpectCleanExitOnSigterm(pid);
}

// A message over its limit is cancelled while it arrives, not buffered
// whole: gRPC 1.51 takes a message whole before it checks its size, so four
// 256 MiB Charge requests of one token holder took cgacctd ~1 GB before the
// receive guard (server/rpc/receive_guard.h); one holder's four 500 MB
// ChargeBatches took 2 GB. Checks each is refused RESOURCE_EXHAUSTED
// "message larger than <its limit> being received" and the peak RSS over
// them.
struct OversizedCase {
  // Over IPv4 or IPv6: gRPC spells an IPv6 peer with escaped brackets, and
  // the guard once missed every IPv6 connection (1.75 GB).
  std::string listen_host = "127.0.0.1";
  std::string method = "/cgacct.v1.Accounting/Charge";
  std::vector<std::string> flags;
  bool token = true;         // with the token's authorization header
  bool health_port = false;  // to --health_listen instead of --listen
  std::string refusal = "--max_message_bytes=4194304 being received";
  int senders = 4;
  // The grpc_server_handled_total series the refusals are counted in (with
  // ResourceExhausted: the code the client got, not what the handler saw,
  // a failed read), e.g. grpc_method="Check",grpc_service="...".
  std::string handled_series;
};

void CheckOversizedMessagesAreCancelled(const OversizedCase& c) {
  constexpr size_t kMessageBytes = size_t{256} << 20;
  constexpr long kMaxGrowthKb = 128 * 1024;
  const TokenFiles files;
  const std::string& token = files.token;
  pid_t pid = -1;
  std::vector<std::string> flags = {"--cpus=2", files.tokens_flag(),
                                    files.policy_flag(),
                                    "--listen=" + c.listen_host + ":0"};
  if (!c.handled_series.empty())
    flags.push_back("--metrics_listen=127.0.0.1:0");
  if (c.health_port) flags.push_back("--health_listen=127.0.0.1:0");
  flags.insert(flags.end(), c.flags.begin(), c.flags.end());
  std::string line;
  std::string target = SpawnDaemon(flags, &pid, &line);
  ASSERT_FALSE(target.empty());
  if (c.health_port) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        line, m, std::regex(R"(health on 127\.0\.0\.1:(\d+))")))
        << line;
    target = "127.0.0.1:" + m[1].str();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const long idle_kb = RssKb(pid);
  // One message whose gRPC prefix announces all of it: what the bytes are
  // does not matter, gRPC takes them before any parsing.
  std::string payload(kMessageBytes, 'x');
  grpc::Slice big_slice(payload);
  payload.clear();
  payload.shrink_to_fit();
  const grpc::ByteBuffer big(&big_slice, 1);
  std::atomic<bool> done{false};
  std::vector<grpc::Status> statuses(c.senders);
  std::vector<std::thread> senders;
  for (int t = 0; t < c.senders; ++t) {
    senders.emplace_back([&, t] {
      grpc::ChannelArguments channel_args;
      channel_args.SetInt("grpc.channel_id", t);  // one connection each
      channel_args.SetMaxSendMessageSize(-1);
      auto channel = grpc::CreateCustomChannel(
          target, grpc::InsecureChannelCredentials(), channel_args);
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(60));
      if (c.token) context.AddMetadata("authorization", "Bearer " + token);
      auto rw = RawStream(*channel, c.method.c_str(), &context);
      rw->Write(big);
      rw->WritesDone();
      grpc::ByteBuffer ignored;
      while (rw->Read(&ignored)) {
      }
      statuses[t] = rw->Finish();
    });
  }
  long peak_kb = idle_kb;
  std::thread sampler([&] {
    while (!done.load()) {
      peak_kb = std::max(peak_kb, RssKb(pid));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  for (std::thread& t : senders) t.join();
  done = true;
  sampler.join();
  std::printf(
      "RSS: idle %ld KiB; %d concurrent %zu MiB %s requests to %s: peak "
      "%ld KiB (%+ld)\n",
      idle_kb, c.senders, kMessageBytes >> 20, c.method.c_str(),
      target.c_str(), peak_kb, peak_kb - idle_kb);
  for (const grpc::Status& status : statuses) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << c.method << ": " << status.error_message();
    EXPECT_THAT(status.error_message(), ::testing::HasSubstr(c.refusal))
        << c.method;
  }
  EXPECT_LT(peak_kb - idle_kb, kMaxGrowthKb) << c.method;
  if (!c.handled_series.empty()) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(
        line, m, std::regex(R"(metrics on 127\.0\.0\.1:(\d+))")))
        << line;
    const std::string scrape =
        test_util::HttpGet(std::stoi(m[1].str()), "/metrics");
    const std::string series =
        "grpc_server_handled_total{grpc_code=\"ResourceExhausted\"," +
        c.handled_series + "} " + std::to_string(c.senders);
    // On failure, the method's handled_total lines (not the whole scrape).
    std::string handled;
    for (size_t at = scrape.find("grpc_server_handled_total{");
         at != std::string::npos;
         at = scrape.find("grpc_server_handled_total{", at + 1)) {
      const std::string row = scrape.substr(at, scrape.find('\n', at) - at);
      if (row.find(c.handled_series) != std::string::npos)
        absl::StrAppend(&handled, row, "\n");
    }
    EXPECT_NE(scrape.find(series), std::string::npos)
        << c.method << ": wanted " << series << "\n" << handled;
  }
  ExpectCleanExitOnSigterm(pid);
}

TEST(MemoryReturnTest, MessagesOverTheLimitAreCancelledWhileArriving) {
#ifdef CGACCT_ASAN
  GTEST_SKIP() << "RSS under AddressSanitizer is not cgacctd's";
#endif
  CheckOversizedMessagesAreCancelled(OversizedCase());
}

TEST(MemoryReturnTest, MessagesOverTheLimitAreCancelledOverIpv6) {
#ifdef CGACCT_ASAN
  GTEST_SKIP() << "RSS under AddressSanitizer is not cgacctd's";
#endif
  OversizedCase c;
  c.listen_host = "[::1]";
  CheckOversizedMessagesAreCancelled(c);
}

// SessionStream is served on gRPC's async API and reflection on its sync
// API, whose interceptors gRPC 1.51 makes before the call has a peer: both
// went unwatched (four 500 MB SessionStream messages: 402 MB peak; four
// reflection requests: 1.4 GB).
TEST(MemoryReturnTest, SessionStreamAndReflectionMessagesOverTheLimit) {
#ifdef CGACCT_ASAN
  GTEST_SKIP() << "RSS under AddressSanitizer is not cgacctd's";
#endif
  OversizedCase session;
  session.method = "/cgacct.v1.Accounting/SessionStream";
  session.senders = 2;
  session.handled_series =
      "grpc_method=\"SessionStream\",grpc_service=\"cgacct.v1.Accounting\","
      "grpc_type=\"bidi_stream\"";
  CheckOversizedMessagesAreCancelled(session);
  OversizedCase reflection;
  reflection.method =
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
  reflection.flags = {"--reflection=on"};
  reflection.token = false;  // reflection is not access-controlled
  reflection.refusal =
      "a health or reflection request's limit=4096 being received";
  reflection.senders = 2;
  reflection.handled_series =
      "grpc_method=\"ServerReflectionInfo\",grpc_service=\"grpc.reflection."
      "v1alpha.ServerReflection\",grpc_type=\"bidi_stream\"";
  CheckOversizedMessagesAreCancelled(reflection);
}

// Health is unauthenticated on --listen and --health_listen: gRPC's own
// health service took four 500 MB checks whole (1.9 GB on --listen, 653 MB
// on --health_listen); cgacctd's (server/rpc/health_service.h) reads its
// request after the call starts, under the guard, 4096 bytes at most.
TEST(MemoryReturnTest, HealthChecksOverTheLimitAreCancelledWhileArriving) {
#ifdef CGACCT_ASAN
  GTEST_SKIP() << "RSS under AddressSanitizer is not cgacctd's";
#endif
  OversizedCase listen;
  listen.method = "/grpc.health.v1.Health/Check";
  listen.token = false;
  listen.refusal =
      "a health or reflection request's limit=4096 being received";
  listen.handled_series =
      "grpc_method=\"Check\",grpc_service=\"grpc.health.v1.Health\","
      "grpc_type=\"unary\"";
  CheckOversizedMessagesAreCancelled(listen);
  OversizedCase health_port = listen;
  health_port.health_port = true;
  health_port.refusal = "the health request limit=4096 being received";
  // (Its calls are counted with --listen's.)
  CheckOversizedMessagesAreCancelled(health_port);
}

// With the receive guard on (access control), compressed requests are
// refused: it sees messages inflated, and ~4 KB gzip messages that inflate
// to 4 MiB credited a connection enough to take a 1.5 GB message whole.
// An HTTP/2 header block that never ends: a HEADERS frame without
// END_HEADERS that puts a 105-byte header in HPACK's table, then
// CONTINUATION frames of 1-byte references to it. gRPC 1.51 decodes and
// keeps the block whole before it makes a call, so no call and no read sees
// it (the third re-attack: 38 MB sent took cgacctd to 3.7-4.2 GB). The
// receive guard closes such a connection ("Connections, not only reads",
// server/rpc/receive_guard.h). Sends on a fresh TCP connection to
// 127.0.0.1:`port` until `limit_bytes` are sent or the server ends the
// connection (its FIN, or an error); returns the bytes sent and sets
// *ended.
// A TCP connection to 127.0.0.1:`port`, or -1.
int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = {};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) !=
      0) {
    close(fd);
    return -1;
  }
  return fd;
}

uint64_t FloodContinuation(int port, uint64_t limit_bytes, bool* ended) {
  *ended = false;
  const int fd = ConnectLoopback(port);
  if (fd < 0) return 0;
  auto frame = [](uint8_t type, uint8_t flags, uint32_t stream,
                  const std::string& payload) {
    std::string f;
    const uint32_t n = static_cast<uint32_t>(payload.size());
    f.push_back(static_cast<char>(n >> 16));
    f.push_back(static_cast<char>(n >> 8));
    f.push_back(static_cast<char>(n));
    f.push_back(static_cast<char>(type));
    f.push_back(static_cast<char>(flags));
    for (int shift = 24; shift >= 0; shift -= 8)
      f.push_back(static_cast<char>(stream >> shift));
    return f + payload;
  };
  // HPACK literals without indexing, new names of < 127 bytes.
  auto literal = [](const std::string& name, const std::string& value) {
    return std::string(1, '\0') + static_cast<char>(name.size()) + name +
           static_cast<char>(value.size()) + value;
  };
  // The table entry: a literal with incremental indexing (0x40).
  std::string indexed = literal("x-big", std::string(100, 'v'));
  indexed[0] = '\x40';
  const std::string preface =
      std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") +
      frame(0x4, 0, 0, "");  // SETTINGS
  bool ok = send(fd, preface.data(), preface.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(preface.size());
  const uint32_t stream = 1;
  const std::string start =
      frame(0x1, 0, stream,  // HEADERS, no END_HEADERS
            "\x83\x86" + literal(":path", "/grpc.health.v1.Health/Check") +
                literal(":authority", "x") +
                literal("content-type", "application/grpc") + indexed);
  // Index 62: the first entry of the dynamic table.
  const std::string references(16000, '\xbe');
  std::string chunk;
  for (int i = 0; i < 4; ++i) chunk += frame(0x9, 0, stream, references);
  uint64_t sent = 0;
  ok = ok && send(fd, start.data(), start.size(), MSG_NOSIGNAL) ==
                 static_cast<ssize_t>(start.size());
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (ok && sent < limit_bytes &&
         std::chrono::steady_clock::now() < deadline) {
    pollfd p = {fd, POLLOUT | POLLRDHUP, 0};
    if (poll(&p, 1, 100) < 0) break;
    // The server's FIN or reset: it ended the connection.
    if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
      *ended = true;
      break;
    }
    if ((p.revents & POLLOUT) == 0) continue;
    const ssize_t n =
        send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) {
      *ended = true;
      break;
    }
    sent += static_cast<uint64_t>(n);
  }
  close(fd);
  return sent;
}

TEST(MemoryReturnTest, EndlessHeaderBlocksAreClosed) {
#ifdef CGACCT_ASAN
  GTEST_SKIP() << "RSS under AddressSanitizer is not cgacctd's";
#endif
  constexpr uint64_t kLimitBytes = uint64_t{64} << 20;  // per connection
  constexpr int kConnections = 4;                      // per port
  // What gRPC decodes before the guard acts (three passes, then the memory
  // evidence: 32 MiB more than the bytes received explain): ~20-25 MB a
  // connection on the machines this was first measured on, +34-102 MB for
  // four; on the 2026-12-07 machine +149-202 MB for the first port (5 runs,
  // one over the 192 MiB this bound was, in the clean-clone CI of 77223ed
  // too), 40-50 MB a connection. The previous binary: 1.9-3.1 GB for 4
  // connections in 2 s; the bound keeps 6x below that.
  constexpr long kMaxGrowthKb = 320 * 1024;
  const TokenFiles files;
  pid_t pid = -1;
  std::string line;
  const std::string target = SpawnDaemon(
      {"--cpus=2", files.tokens_flag(), files.policy_flag(),
       "--health_listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0"},
      &pid, &line);
  ASSERT_FALSE(target.empty());
  const int health_port = PortAfter(line, "health on");
  ASSERT_GT(health_port, 0) << line;
  const int metrics_port = PortAfter(line, "metrics on");
  ASSERT_GT(metrics_port, 0) << line;
  const int listen_port = std::stoi(target.substr(target.rfind(':') + 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const long idle_kb = RssKb(pid);
  for (const int port : {listen_port, health_port}) {
    std::atomic<bool> done{false};
    const long before_kb = RssKb(pid);
    long peak_kb = before_kb;
    std::thread sampler([&] {
      while (!done.load()) {
        peak_kb = std::max(peak_kb, RssKb(pid));
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
    std::vector<uint64_t> sent(kConnections);
    std::vector<char> ended(kConnections);
    std::vector<std::thread> floods;
    for (int i = 0; i < kConnections; ++i) {
      floods.emplace_back([&, i] {
        bool e = false;
        sent[i] = FloodContinuation(port, kLimitBytes, &e);
        ended[i] = e;
      });
    }
    for (std::thread& t : floods) t.join();
    done = true;
    sampler.join();
    std::printf("RSS: idle %ld KiB, %ld KiB before; %d endless header blocks "
                "to port %d: peak %ld KiB (%+ld); sent (MB):",
                idle_kb, before_kb, kConnections, port, peak_kb,
                peak_kb - before_kb);
    for (int i = 0; i < kConnections; ++i) {
      std::printf(" %.1f%s", sent[i] / 1e6, ended[i] ? "" : " (not ended)");
      EXPECT_TRUE(ended[i]) << "connection " << i << " to port " << port
                            << " took " << sent[i] << " bytes";
      EXPECT_GT(sent[i], 100000u) << "the flood did not run";
    }
    std::printf("\n");
    EXPECT_LT(peak_kb - before_kb, kMaxGrowthKb) << "port " << port;
  }
  // Counted; and both ports still answer.
  const std::string scrape = test_util::HttpGet(metrics_port, "/metrics");
  EXPECT_NE(scrape.find(absl::StrCat("cgacct_flooding_connections_closed_total ",
                                     2 * kConnections)),
            std::string::npos)
      << "no cgacct_flooding_connections_closed_total "
      << 2 * kConnections;
  for (const int port : {listen_port, health_port}) {
    auto health = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
        absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status status = health->Check(&context, request, &response);
    EXPECT_TRUE(status.ok()) << port << ": " << status.error_message();
    EXPECT_EQ(response.status(),
              grpc::health::v1::HealthCheckResponse::SERVING);
  }
  ExpectCleanExitOnSigterm(pid);
}

// Header blocks parked under the bound: each of `connections` connections
// to 127.0.0.1:`port` sends `bytes` of an endless header block (as
// FloodContinuation) and keeps the connection open. Returns the sockets
// (the caller closes them).
std::vector<int> ParkContinuations(int port, int connections,
                                   uint64_t bytes) {
  std::vector<int> fds;
  std::string indexed = std::string(1, '\x40') + '\x05' + "x-big" + 'd' +
                        std::string(100, 'v');
  auto frame = [](uint8_t type, uint8_t flags, const std::string& payload) {
    const uint32_t n = static_cast<uint32_t>(payload.size());
    return std::string{static_cast<char>(n >> 16), static_cast<char>(n >> 8),
                       static_cast<char>(n), static_cast<char>(type),
                       static_cast<char>(flags), 0, 0, 0, 1} +
           payload;
  };
  auto literal = [](const std::string& name, const std::string& value) {
    return std::string(1, '\0') + static_cast<char>(name.size()) + name +
           static_cast<char>(value.size()) + value;
  };
  std::string message =
      std::string("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n") +
      std::string{0, 0, 0, 4, 0, 0, 0, 0, 0} +  // SETTINGS
      frame(0x1, 0,
            "\x83\x86" + literal(":path", "/grpc.health.v1.Health/Check") +
                literal(":authority", "x") +
                literal("content-type", "application/grpc") + indexed);
  for (uint64_t sent = 0; sent < bytes; sent += 16000) {
    message += frame(0x9, 0,
                     std::string(std::min<uint64_t>(16000, bytes - sent),
                                 '\xbe'));
  }
  for (int i = 0; i < connections; ++i) {
    const int fd = ConnectLoopback(port);
    if (fd < 0) continue;
    if (send(fd, message.data(), message.size(), MSG_NOSIGNAL) !=
        static_cast<ssize_t>(message.size())) {
      close(fd);
      continue;
    }
    fds.push_back(fd);
  }
  return fds;
}

// 100 connections each holding 60 KB of an endless header block, under the
// bound, and waiting: 835 MB for 200 from 64ef184's binary, for as long as
// they stay. A host may hold 16 such parked connections; the others are
// closed ("Parked header blocks", receive_guard.h). What they cost while
// they arrive is not bounded (connections opened faster than the guard's
// passes are all decoded: the peak is printed, not checked); what stays is.
TEST(MemoryReturnTest, ParkedHeaderBlocksPastAHostsLimitAreClosed) {
#ifdef CGACCT_ASAN
  GTEST_SKIP() << "RSS under AddressSanitizer is not cgacctd's";
#endif
  constexpr int kConnections = 100;
  // The host's 16 parked connections, ~4 MB each decoded.
  constexpr long kMaxHeldGrowthKb = 128 * 1024;
  const TokenFiles files;
  pid_t pid = -1;
  std::string line;
  const std::string target = SpawnDaemon(
      {"--cpus=2", files.tokens_flag(), files.policy_flag(),
       "--metrics_listen=127.0.0.1:0"},
      &pid, &line);
  ASSERT_FALSE(target.empty());
  const int metrics_port = PortAfter(line, "metrics on");
  ASSERT_GT(metrics_port, 0) << line;
  const int listen_port = std::stoi(target.substr(target.rfind(':') + 1));
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const long before_kb = RssKb(pid);
  const std::vector<int> fds =
      ParkContinuations(listen_port, kConnections, 60000);
  ASSERT_EQ(fds.size(), static_cast<size_t>(kConnections));
  long peak_kb = before_kb;
  for (int i = 0; i < 30; ++i) {  // 1.5 s held
    peak_kb = std::max(peak_kb, RssKb(pid));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const long held_kb = RssKb(pid);
  // The server ended all but the host's 16.
  int ended = 0;
  for (const int fd : fds) {
    pollfd p = {fd, POLLRDHUP, 0};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP)) != 0)
      ++ended;
    close(fd);
  }
  std::printf("RSS: %ld KiB before; %d parked header blocks of 60 KB: peak "
              "%ld KiB (%+ld), %ld KiB after 1.5 s; %d ended by the server\n",
              before_kb, kConnections, peak_kb, peak_kb - before_kb, held_kb,
              ended);
  EXPECT_EQ(ended,
            kConnections -
                static_cast<int>(ReceiveGuard::kMaxParkedConnectionsPerHost));
  EXPECT_LT(held_kb - before_kb, kMaxHeldGrowthKb);
  const std::string scrape = test_util::HttpGet(metrics_port, "/metrics");
  EXPECT_NE(scrape.find(absl::StrCat(
                "cgacct_flooding_connections_closed_total ",
                kConnections -
                    static_cast<int>(
                        ReceiveGuard::kMaxParkedConnectionsPerHost))),
            std::string::npos);
  ExpectCleanExitOnSigterm(pid);
}

TEST(MemoryReturnTest, CompressedRequestsAreRefusedWithTheReceiveGuard) {
  const TokenFiles files;
  pid_t pid = -1;
  const std::string target = SpawnDaemon(
      {"--cpus=2", files.tokens_flag(), files.policy_flag()}, &pid);
  ASSERT_FALSE(target.empty());
  auto stub = v1::Accounting::NewStub(
      grpc::CreateChannel(target, grpc::InsecureChannelCredentials()));
  for (const grpc_compression_algorithm algorithm :
       {GRPC_COMPRESS_GZIP, GRPC_COMPRESS_DEFLATE, GRPC_COMPRESS_NONE}) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::seconds(10));
    context.AddMetadata("authorization", "Bearer " + files.token);
    context.set_compression_algorithm(algorithm);
    v1::GetStatsRequest request;
    request.set_path(std::string(100000, 'a'));  // worth compressing
    v1::GroupStats response;
    const grpc::Status status = stub->GetStats(&context, request, &response);
    if (algorithm == GRPC_COMPRESS_NONE) {
      // Read and refused on its own merits.
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << status.error_message();
    } else {
      EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED)
          << algorithm << ": " << status.error_message();
    }
  }
  stub.reset();  // the connection closed: SIGTERM does not wait for it
  ExpectCleanExitOnSigterm(pid);
}

}  // namespace
}  // namespace cgacct
