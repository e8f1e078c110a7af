// The cost of one ListGroups page (issue 22, finding 13) as the tree grows:
// the page the server answered before (Engine::ListGroups of the whole
// subtree, the caller's view applied, then upper_bound to the token and a
// page copied: the baseline, measured in the same run) against a page the
// engine seeks to (Engine::ListGroupsPage over its sorted index).
//
// The tree: /big with N children (one in 100 with a child of its own), and
// /t/a, a tenant's subtree of 11 groups. Cases, each for N = 1,000, 10,000
// and 100,000:
//   ChildrenPage   an admin's page of 1,000 children of /big from the middle
//                  (the token is the 500th child);
//   TenantFromRoot a tenant granted /t/a lists "/" recursively (its 11
//                  groups): what finding 13 said it paid for every other
//                  tenant's groups.
// Not part of the test run. Usage:
//   list_groups_benchmark --benchmark_repetitions=5
//       --benchmark_report_aggregates_only=true   (one line)
#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "engine/engine.h"
#include "engine/group_path.h"

namespace cgacct {
namespace {

constexpr size_t kPageSize = 1000;

// One engine per tree size, built on first use and kept for the process.
Engine* TreeOf(int children) {
  static auto* engines = new std::map<int, std::unique_ptr<Engine>>();
  auto it = engines->find(children);
  if (it != engines->end()) return it->second.get();
  EngineOptions options;
  options.nr_cpus = 2;
  std::unique_ptr<Engine> engine = std::move(*Engine::Create(options));
  (void)engine->CreateGroup("/big", {});
  for (int i = 0; i < children; ++i) {
    const std::string child = absl::StrCat("/big/g", i);
    (void)engine->CreateGroup(child, {});
    if (i % 100 == 0) (void)engine->CreateGroup(child + "/leaf", {});
  }
  (void)engine->CreateGroup("/t", {});
  (void)engine->CreateGroup("/t/a", {});
  for (int i = 0; i < 10; ++i)
    (void)engine->CreateGroup(absl::StrCat("/t/a/", i), {});
  Engine* raw = engine.get();
  engines->emplace(children, std::move(engine));
  return raw;
}

// The server's ListGroups before the seek: list all, view, page.
std::vector<std::string> FullListingThenPage(
    const Engine& engine, const std::string& path, bool recursive,
    const std::string& after,
    const std::optional<std::vector<std::string>>& within) {
  std::vector<std::string> paths = *engine.ListGroups(path, recursive);
  if (within.has_value()) {
    paths.erase(std::remove_if(paths.begin(), paths.end(),
                               [&](const std::string& p) {
                                 for (const std::string& w : *within)
                                   if (PathAtOrBelow(p, w)) return false;
                                 return true;
                               }),
                paths.end());
  }
  auto first = after.empty()
                   ? paths.begin()
                   : std::upper_bound(paths.begin(), paths.end(), after);
  auto last = first + static_cast<ptrdiff_t>(
                          std::min<size_t>(paths.end() - first, kPageSize));
  return std::vector<std::string>(std::make_move_iterator(first),
                                  std::make_move_iterator(last));
}

std::vector<std::string> SeekPage(
    const Engine& engine, const std::string& path, bool recursive,
    const std::string& after,
    const std::optional<std::vector<std::string>>& within) {
  GroupListing listing;
  listing.recursive = recursive;
  listing.after = after;
  listing.max_paths = kPageSize;
  listing.within = within;
  return std::move(engine.ListGroupsPage(path, listing)->paths);
}

template <auto Page>
void BM_ChildrenPage(benchmark::State& state) {
  const Engine& engine = *TreeOf(static_cast<int>(state.range(0)));
  const std::string after = (*engine.ListGroups("/big", false))[499];
  size_t returned = 0;
  for (auto _ : state) {
    std::vector<std::string> page = Page(engine, "/big", false, after,
                                         std::nullopt);
    returned = page.size();
    benchmark::DoNotOptimize(page);
  }
  state.counters["paths"] = static_cast<double>(returned);
}

template <auto Page>
void BM_TenantFromRoot(benchmark::State& state) {
  const Engine& engine = *TreeOf(static_cast<int>(state.range(0)));
  const std::optional<std::vector<std::string>> within =
      std::vector<std::string>{"/t/a"};
  size_t returned = 0;
  for (auto _ : state) {
    std::vector<std::string> page = Page(engine, "/", true, "", within);
    returned = page.size();
    benchmark::DoNotOptimize(page);
  }
  state.counters["paths"] = static_cast<double>(returned);
}

BENCHMARK_TEMPLATE(BM_ChildrenPage, FullListingThenPage)
    ->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_ChildrenPage, SeekPage)
    ->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_TenantFromRoot, FullListingThenPage)
    ->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(BM_TenantFromRoot, SeekPage)
    ->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace cgacct

BENCHMARK_MAIN();
