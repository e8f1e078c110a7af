// gRPC's log lines, rate-limited per call site (server/daemon/grpc_log.h).
#include "server/daemon/grpc_log.h"

#include <grpc/support/log.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace cgacct {

bool LogSiteLimiter::Admit(const std::string& site, absl::Time now,
                           uint64_t* suppressed, absl::Duration* since) {
  *suppressed = 0;
  *since = absl::ZeroDuration();
  auto [it, inserted] = sites_.try_emplace(site);
  Site& s = it->second;
  if (inserted) s.refilled = now;
  s.tokens = std::min(
      kBurst, s.tokens + absl::ToDoubleSeconds(now - s.refilled) * kPerSecond);
  s.refilled = now;
  if (s.tokens < 1) {
    if (s.suppressed++ == 0) s.first_suppressed = now;
    return false;
  }
  s.tokens -= 1;
  if (s.suppressed > 0) {
    *suppressed = s.suppressed;
    *since = now - s.first_suppressed;
    s.suppressed = 0;
  }
  return true;
}

std::vector<LogSiteLimiter::HeldBack> LogSiteLimiter::TakeHeldBack(
    absl::Time now, absl::Duration older_than) {
  std::vector<HeldBack> out;
  for (auto& [site, s] : sites_) {
    if (s.suppressed == 0 || now - s.first_suppressed < older_than) continue;
    out.push_back({site, s.suppressed, now - s.first_suppressed});
    s.suppressed = 0;
  }
  return out;
}

namespace {

absl::Mutex g_mu;
LogSiteLimiter* g_limiter ABSL_GUARDED_BY(g_mu) = nullptr;

// gRPC's default line: "E1207 06:20:00.123456    4242 file:line] message".
void WriteLine(const gpr_log_func_args* args) {
  struct timeval tv;
  gettimeofday(&tv, nullptr);
  struct tm tm;
  localtime_r(&tv.tv_sec, &tm);
  char when[32];
  std::strftime(when, sizeof(when), "%m%d %H:%M:%S", &tm);
  const char* file = args->file;
  if (const char* slash = std::strrchr(file, '/')) file = slash + 1;
  std::fprintf(stderr, "%s%s.%06ld %7ld %s:%d] %s\n",
               gpr_log_severity_string(args->severity), when,
               static_cast<long>(tv.tv_usec), static_cast<long>(getpid()),
               file, args->line, args->message);
}

void LimitedLog(gpr_log_func_args* args) {
  const std::string site = absl::StrCat(args->file, ":", args->line);
  uint64_t suppressed;
  absl::Duration since;
  bool admit;
  {
    absl::MutexLock l(&g_mu);
    admit = g_limiter->Admit(site, absl::Now(), &suppressed, &since);
  }
  if (!admit) return;
  if (suppressed > 0) {
    std::fprintf(stderr,
                 "cgacctd: gRPC: %llu lines like the next one from %s "
                 "suppressed in the last %s\n",
                 static_cast<unsigned long long>(suppressed), site.c_str(),
                 absl::FormatDuration(absl::Trunc(since, absl::Milliseconds(100)))
                     .c_str());
  }
  WriteLine(args);
}

void SayHeldBack(absl::Duration older_than) {
  std::vector<LogSiteLimiter::HeldBack> held;
  {
    absl::MutexLock l(&g_mu);
    if (g_limiter == nullptr) return;
    held = g_limiter->TakeHeldBack(absl::Now(), older_than);
  }
  for (const LogSiteLimiter::HeldBack& h : held) {
    std::fprintf(stderr,
                 "cgacctd: gRPC: %llu lines from %s suppressed in the last "
                 "%s\n",
                 static_cast<unsigned long long>(h.count), h.site.c_str(),
                 absl::FormatDuration(absl::Trunc(h.since, absl::Milliseconds(100)))
                     .c_str());
  }
}

}  // namespace

void InstallGrpcLogLimiter() {
  {
    absl::MutexLock l(&g_mu);
    if (g_limiter != nullptr) return;
    g_limiter = new LogSiteLimiter;  // lives as long as gRPC may log
  }
  gpr_set_log_function(&LimitedLog);
  // Detached: it only sleeps and prints, until the process exits.
  std::thread([] {
    for (;;) {
      absl::SleepFor(absl::Seconds(1));
      SayHeldBack(absl::Seconds(1));
    }
  }).detach();
}

void FlushGrpcLogHeldBack() { SayHeldBack(absl::ZeroDuration()); }

}  // namespace cgacct
