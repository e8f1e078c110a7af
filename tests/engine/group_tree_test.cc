// GroupTree's listings (Engine::ListGroups, Engine::ListGroupsPage): every
// page sequence against a listing filtered and sorted by brute force, and the
// cost of a page, which must not grow with the tree (issue 22, finding 13:
// each page used to list the whole subtree, then filter and page).
#include <algorithm>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/group_path.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cgacct {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class GroupTreeListingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions options;
    options.nr_cpus = 2;
    auto engine = Engine::Create(options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
  }
  void Create(const std::string& path) {
    ASSERT_TRUE(engine_->CreateGroup(path, {}).ok()) << path;
  }
  // Every page of a listing, `max_paths` at a time, concatenated; checks
  // that each page but the last is full and says `more`.
  std::vector<std::string> AllPages(const std::string& path,
                                    GroupListing listing, size_t max_paths) {
    listing.max_paths = max_paths;
    listing.after.clear();
    std::vector<std::string> out;
    for (int pages = 0; pages < 100000; ++pages) {
      absl::StatusOr<GroupPage> page = engine_->ListGroupsPage(path, listing);
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok()) break;
      out.insert(out.end(), page->paths.begin(), page->paths.end());
      if (!page->more) break;
      EXPECT_EQ(page->paths.size(), max_paths);
      if (page->paths.empty()) break;  // max_paths 0: nothing to resume from
      listing.after = page->paths.back();
    }
    return out;
  }
  std::unique_ptr<Engine> engine_;
};

// What a listing must answer: every group strictly below `path` (its
// children only, unless recursive) that is at or below one of `within`,
// in byte order.
std::vector<std::string> Expected(
    const std::vector<std::string>& groups, const std::string& path,
    bool recursive, const std::optional<std::vector<std::string>>& within) {
  std::vector<std::string> out;
  for (const std::string& g : groups) {
    if (!PathStrictlyBelow(g, path)) continue;
    if (!recursive && ParentPath(g) != path) continue;
    if (within.has_value() &&
        std::none_of(within->begin(), within->end(),
                     [&](const std::string& w) { return PathAtOrBelow(g, w); }))
      continue;
    out.push_back(g);
  }
  std::sort(out.begin(), out.end());
  return out;
}

TEST_F(GroupTreeListingTest, SortsAsBytesWhereASiblingSortsInsideASubtree) {
  // '-' and '.' sort before '/': "/a-b" comes between "/a" and "/a/x".
  for (const char* p : {"/a", "/a-b", "/a.c", "/a/x", "/a/x/y", "/a0", "/B"})
    Create(p);
  EXPECT_THAT(*engine_->ListGroups("/", true),
              ElementsAre("/B", "/a", "/a-b", "/a.c", "/a/x", "/a/x/y", "/a0"));
  EXPECT_THAT(*engine_->ListGroups("/", false),
              ElementsAre("/B", "/a", "/a-b", "/a.c", "/a0"));
  GroupListing listing;
  listing.within = std::vector<std::string>{"/a", "/a0"};
  EXPECT_THAT(AllPages("/", listing, 1), ElementsAre("/a", "/a0"));
  listing.recursive = true;
  EXPECT_THAT(AllPages("/", listing, 2),
              ElementsAre("/a", "/a/x", "/a/x/y", "/a0"));
  listing.within = std::vector<std::string>{"/a/x/y", "/a-b", "/a/x"};
  EXPECT_THAT(AllPages("/", listing, 3),
              ElementsAre("/a-b", "/a/x", "/a/x/y"));
  listing.recursive = false;  // neither is a child of "/a" but "/a/x"
  EXPECT_THAT(AllPages("/a", listing, 3), ElementsAre("/a/x"));
}

TEST_F(GroupTreeListingTest, PagesMatchAFilteredSortedListingOfRandomTrees) {
  std::mt19937 rng(20261205);
  // Names whose bytes straddle '/': '-' and '.' below it, digits, capitals
  // and '_' above.
  const std::vector<std::string> names = {"a", "a-", "a.", "a-b", "a0",
                                          "A", "_", "b", "ab", "9"};
  std::vector<std::string> groups = {"/"};
  for (int i = 0; i < 400; ++i) {
    const std::string& parent = groups[rng() % groups.size()];
    std::string path = absl::StrCat(parent == "/" ? "" : parent, "/",
                                    names[rng() % names.size()]);
    if (engine_->CreateGroup(path, {}).ok()) groups.push_back(path);
  }
  ASSERT_GT(groups.size(), 200u);  // a deep, bushy tree
  size_t listed = 0;
  for (int round = 0; round < 300; ++round) {
    // Half the rounds list one of the first groups made (big subtrees).
    const std::string& path =
        groups[rng() % (round % 2 == 0 ? size_t{12} : groups.size())];
    GroupListing listing;
    listing.recursive = rng() % 2 == 0;
    if (rng() % 4 != 0) {  // a view of 0 to 3 subtrees, maybe nested
      std::vector<std::string> within;
      const int n = static_cast<int>(rng() % 4);
      for (int i = 0; i < n; ++i) within.push_back(groups[rng() % groups.size()]);
      listing.within = within;
    }
    const size_t max_paths = 1 + rng() % 7;
    SCOPED_TRACE(absl::StrCat("path ", path, " recursive ", listing.recursive,
                              " max_paths ", max_paths));
    const std::vector<std::string> expected =
        Expected(groups, path, listing.recursive, listing.within);
    EXPECT_EQ(AllPages(path, listing, max_paths), expected);
    listed += expected.size();
  }
  EXPECT_GT(listed, 1000u);  // the rounds listed something
}

TEST_F(GroupTreeListingTest, ACursorSurvivesTheDeletionOfItsPath) {
  for (const char* p : {"/t", "/t/a", "/t/b", "/t/c", "/t/d"}) Create(p);
  GroupListing listing;
  listing.max_paths = 2;
  absl::StatusOr<GroupPage> page = engine_->ListGroupsPage("/t", listing);
  ASSERT_TRUE(page.ok());
  EXPECT_THAT(page->paths, ElementsAre("/t/a", "/t/b"));
  EXPECT_TRUE(page->more);
  ASSERT_TRUE(engine_->DeleteGroup("/t/b").ok());
  Create("/t/bb");  // sorts after the cursor: shows
  Create("/t/0");   // before it: does not
  listing.after = "/t/b";
  page = engine_->ListGroupsPage("/t", listing);
  ASSERT_TRUE(page.ok());
  EXPECT_THAT(page->paths, ElementsAre("/t/bb", "/t/c"));
  EXPECT_TRUE(page->more);
}

TEST_F(GroupTreeListingTest, RefusesABadOrMissingPathAndAnswersEmptyViews) {
  EXPECT_EQ(engine_->ListGroupsPage("a", {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine_->ListGroupsPage("/nope", {}).status().code(),
            absl::StatusCode::kNotFound);
  Create("/a");
  GroupListing listing;
  listing.within = std::vector<std::string>{};  // may read nothing
  EXPECT_THAT(engine_->ListGroupsPage("/", listing)->paths, IsEmpty());
  listing.within.reset();
  listing.max_paths = 0;
  absl::StatusOr<GroupPage> page = engine_->ListGroupsPage("/", listing);
  EXPECT_THAT(page->paths, IsEmpty());
  EXPECT_TRUE(page->more);
}

// Finding 13: 20,000 children of one group, another tenant's small subtree.
// A page's cost is its size plus a constant, wherever it starts and
// whatever else the tree holds.
TEST_F(GroupTreeListingTest, APageCostsItsSizeNotTheTree) {
  constexpr int kChildren = 20000;
  Create("/big");
  for (int i = 0; i < kChildren; ++i) {
    std::string child = absl::StrCat("/big/g", i);
    Create(child);
    if (i % 100 == 0) Create(child + "/leaf");  // grandchildren to step over
  }
  Create("/t");
  Create("/t/a");
  for (int i = 0; i < 10; ++i) Create(absl::StrCat("/t/a/", i));

  GroupListing listing;
  listing.max_paths = 1000;
  // Children of /big, page after page: each looks at ~1,000 entries plus
  // one seek per grandchild's subtree it steps over.
  size_t pages = 0;
  uint64_t max_scanned = 0;
  size_t total = 0;
  for (;; ++pages) {
    absl::StatusOr<GroupPage> page = engine_->ListGroupsPage("/big", listing);
    ASSERT_TRUE(page.ok());
    total += page->paths.size();
    max_scanned = std::max(max_scanned, page->nr_scanned);
    if (!page->more) break;
    listing.after = page->paths.back();
  }
  EXPECT_EQ(total, static_cast<size_t>(kChildren));
  EXPECT_LE(max_scanned, 1000u + 2 * 11 + 2) << "per 1,000-path page";

  // The last page of a recursive listing of /big starts at its token.
  listing.recursive = true;
  listing.after = "/big/g9998";
  absl::StatusOr<GroupPage> page = engine_->ListGroupsPage("/big", listing);
  ASSERT_TRUE(page.ok());
  EXPECT_THAT(page->paths, ElementsAre("/big/g9999"));
  EXPECT_LE(page->nr_scanned, 3u);

  // A tenant granted /t/a lists from "/": only its subtree is looked at.
  listing = GroupListing{};
  listing.recursive = true;
  listing.within = std::vector<std::string>{"/t/a"};
  page = engine_->ListGroupsPage("/", listing);
  ASSERT_TRUE(page.ok());
  EXPECT_EQ(page->paths.size(), 11u);
  EXPECT_FALSE(page->more);
  EXPECT_LE(page->nr_scanned, 11u + 4);

  // The children of "/" step over /big's 20,000 in one seek.
  listing = GroupListing{};
  page = engine_->ListGroupsPage("/", listing);
  ASSERT_TRUE(page.ok());
  EXPECT_THAT(page->paths, ElementsAre("/big", "/t"));
  EXPECT_LE(page->nr_scanned, 6u);
}

}  // namespace
}  // namespace cgacct
