// SqliteStateStore (server/idempotency/sqlite_state_store.h): an open
// store's reads and writes (opening it: sqlite_store_open.cc).
#include "server/idempotency/sqlite_state_store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/idempotency/sqlite_rows.h"

namespace cgacct {
namespace {

using sqlite_rows::FromDb;
using sqlite_rows::kSchemaVersion;
using sqlite_rows::ToDb;

// A window is pruned after this many puts (or sooner, past its byte bound).
constexpr uint64_t kPrunePuts = 256;

// What a failed group change means, for the operator's line.
constexpr absl::string_view kGroupChangeRefused =
    "the group change is refused and its caller told so; the tree in memory "
    "is unchanged";


}  // namespace

SqliteStateStore::SqliteStateStore(sqlite3* db, std::string dir,
                                   std::string path, Options options,
                                   StateDirLock lock, AckedChangesFile acked)
    : dir_(std::move(dir)),
      path_(std::move(path)),
      options_(std::move(options)),
      db_(db),
      lock_(std::move(lock)),
      acked_(std::move(acked)) {}

SqliteStateStore::~SqliteStateStore() {
  absl::MutexLock l(&mu_);
  (void)acked_.Sync();  // written per change, synced when closed
  for (sqlite3_stmt*& stmt : statements_) {
    if (stmt != nullptr) sqlite3_finalize(stmt);
    stmt = nullptr;
  }
  sqlite3_close(db_);
}

absl::Status SqliteStateStore::ErrorLocked(absl::string_view what) {
  const int code = sqlite3_errcode(db_);
  const std::string message = absl::StrCat("state store ", path_, ": ", what,
                                           ": ", sqlite3_errmsg(db_));
  if (code == SQLITE_CORRUPT || code == SQLITE_NOTADB)
    return absl::DataLossError(message);
  if (code == SQLITE_BUSY || code == SQLITE_LOCKED || code == SQLITE_FULL ||
      code == SQLITE_IOERR)
    return absl::UnavailableError(message);
  return absl::InternalError(message);
}

absl::Status SqliteStateStore::ExecLocked(const char* sql) {
  if (sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) != SQLITE_OK) {
    absl::string_view what = absl::StripLeadingAsciiWhitespace(sql);
    what = what.substr(0, std::min(what.find('\n'), size_t{40}));
    return ErrorLocked(absl::StrCat("running \"", what, "\""));
  }
  return absl::OkStatus();
}

absl::Status SqliteStateStore::SyncLocked(bool full) {
  if (sync_full_ == (full ? 1 : 0)) return absl::OkStatus();
  absl::Status s = ExecLocked(full ? "PRAGMA synchronous=FULL"
                                   : "PRAGMA synchronous=NORMAL");
  if (s.ok()) sync_full_ = full ? 1 : 0;
  return s;
}

absl::StatusOr<sqlite3_stmt*> SqliteStateStore::PrepareLocked(int slot,
                                                              const char* sql) {
  sqlite3_stmt*& stmt = statements_[slot];
  if (stmt == nullptr) {
    if (sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt,
                           nullptr) != SQLITE_OK) {
      stmt = nullptr;
      return ErrorLocked("preparing a statement");
    }
  }
  sqlite3_reset(stmt);
  sqlite3_clear_bindings(stmt);
  return stmt;
}

absl::Status SqliteStateStore::ReportLocked(absl::Status failed,
                                            absl::string_view meaning) {
  if (options_.on_write_error == nullptr) return failed;
  const absl::Time now = absl::Now();
  if (now - last_report_ < options_.write_error_interval) {
    ++unreported_failures_;
    return failed;
  }
  std::string line = absl::StrCat(failed.message(), " (", meaning, ")");
  if (unreported_failures_ > 0) {
    absl::StrAppend(&line, "; ", unreported_failures_,
                    " more failed writes since the last report");
  }
  last_report_ = now;
  unreported_failures_ = 0;
  options_.on_write_error(line);
  return failed;
}

absl::Status SqliteStateStore::PutMetaLocked(absl::string_view key,
                                             absl::string_view value) {
  absl::StatusOr<sqlite3_stmt*> stmt =
      PrepareLocked(kPutMeta, sqlite_rows::kPutMetaSql);
  if (!stmt.ok()) return stmt.status();
  sqlite_rows::BindMetaRow(*stmt, key, value);
  const int step = sqlite3_step(*stmt);
  sqlite3_reset(*stmt);
  if (step != SQLITE_DONE) return ErrorLocked("writing meta");
  return absl::OkStatus();
}

absl::Status SqliteStateStore::BeginGroupChangeLocked() {
  if (absl::Status s = SyncLocked(true); !s.ok())
    return ReportLocked(s, kGroupChangeRefused);
  if (absl::Status s = ExecLocked("BEGIN IMMEDIATE"); !s.ok())
    return ReportLocked(s, kGroupChangeRefused);
  return absl::OkStatus();
}

absl::Status SqliteStateStore::EndGroupChangeLocked(absl::Status change) {
  if (change.ok()) {
    change = PutMetaLocked("group_changes", absl::StrCat(group_changes_ + 1));
  }
  if (change.ok()) change = ExecLocked("COMMIT");
  if (!change.ok()) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    if (absl::IsNotFound(change) || absl::IsAlreadyExists(change))
      return change;
    return ReportLocked(change, kGroupChangeRefused);
  }
  ++group_changes_;
  if (absl::Status w = acked_.Write(group_changes_); !w.ok()) {
    // The change is committed; only its loss would go unnoticed.
    (void)ReportLocked(w,
                       "the change is stored, but a later loss of it would "
                       "not be detected at start");
  }
  return absl::OkStatus();
}

absl::StatusOr<StateStore::Snapshot> SqliteStateStore::Load(
    int64_t requests_since_unix_ns) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = SyncLocked(true); !s.ok()) return s;
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db_, "DELETE FROM requests WHERE arrived < ?1", -1, &stmt,
                     nullptr);
  sqlite3_bind_int64(stmt, 1, requests_since_unix_ns);
  int step = sqlite3_step(stmt);
  sqlite3_finalize(stmt);
  if (step != SQLITE_DONE) return ErrorLocked("expiring requests");

  sqlite_rows::Rows rows;
  sqlite_rows::ReadGroupsAndRequests(db_, kSchemaVersion, &rows);
  if (!rows.unreadable.empty()) {
    return absl::DataLossError(absl::StrCat(
        "state store ", path_, ": cannot read ", rows.unreadable.front()));
  }
  // Groups whose parent is not stored (below a damaged row, or a row
  // deleted whole): the engine could not re-create them.
  for (const StoredGroup& g : sqlite_rows::TakeOrphans(rows.groups)) {
    rows.damaged.push_back(sqlite_rows::DamagedRow{
        "groups", ToDb(g.generation),
        absl::StrCat(sqlite_rows::Describe(g),
                     ", whose parent group is not stored")});
  }
  if (!rows.damaged.empty() && !options_.recover) {
    return absl::DataLossError(absl::StrCat(
        "state store ", path_, ": ", rows.damaged.size(),
        " stored row(s) are damaged (a checksum that fails, or a group "
        "whose parent is not stored), the first: ",
        rows.damaged.front().what,
        ". Start with --state_recover to drop them, or put ", dir_,
        " back from a backup"));
  }
  // Recovering: the damaged rows go.
  for (const sqlite_rows::DamagedRow& row : rows.damaged) {
    const std::string sql =
        absl::StrCat("DELETE FROM ", row.table, " WHERE rowid = ?1");
    sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr);
    sqlite3_bind_int64(stmt, 1, row.rowid);
    step = sqlite3_step(stmt);
    sqlite3_finalize(stmt);
    if (step != SQLITE_DONE) return ErrorLocked("dropping a damaged row");
  }
  if (!rows.damaged.empty()) {
    notes_.push_back(absl::StrCat(
        "dropped ", rows.damaged.size(),
        " damaged row(s), the first: ", rows.damaged.front().what));
  }
  // Each identity's bytes are read at its first put.
  for (auto& partitions : partitions_) partitions.clear();
  if (absl::Status s = VacuumLocked(); !s.ok()) return s;
  Snapshot snapshot;
  snapshot.groups = std::move(rows.groups);
  snapshot.requests = std::move(rows.requests);
  return snapshot;
}

absl::StatusOr<uint64_t> SqliteStateStore::CreateGroup(absl::string_view path,
                                                       const Limits& limits,
                                                       bool oom_group,
                                                       absl::string_view creator) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = BeginGroupChangeLocked(); !s.ok()) return s;
  StoredGroup group{std::string(path), limits, 0, oom_group,
                    std::string(creator)};
  absl::Status s = InsertGroupLocked(&group);
  if (absl::Status end = EndGroupChangeLocked(std::move(s)); !end.ok())
    return end;
  return group.generation;
}

absl::Status SqliteStateStore::InsertGroupLocked(StoredGroup* group) {
  // The next generation, as AUTOINCREMENT would choose it (never reused).
  absl::StatusOr<sqlite3_stmt*> last =
      PrepareLocked(kLastGeneration, sqlite_rows::kLastGenerationSql);
  if (!last.ok()) return last.status();
  if (sqlite3_step(*last) != SQLITE_ROW)
    return ErrorLocked("choosing a generation");
  group->generation = FromDb(sqlite3_column_int64(*last, 0)) + 1;
  sqlite3_reset(*last);
  absl::StatusOr<sqlite3_stmt*> stmt =
      PrepareLocked(kInsertGroup, sqlite_rows::kInsertGroupSql);
  if (!stmt.ok()) return stmt.status();
  sqlite_rows::BindGroupRow(*stmt, *group);
  const int step = sqlite3_step(*stmt);
  sqlite3_reset(*stmt);
  if (step == SQLITE_CONSTRAINT)
    return absl::AlreadyExistsError(
        absl::StrCat("state store: ", group->path, " is stored"));
  if (step != SQLITE_DONE) return ErrorLocked("creating a group");
  return absl::OkStatus();
}

absl::Status SqliteStateStore::SetLimits(absl::string_view path,
                                         const Limits& limits, bool oom_group) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = BeginGroupChangeLocked(); !s.ok()) return s;
  return EndGroupChangeLocked(UpdateLimitsLocked(path, limits, oom_group));
}

absl::Status SqliteStateStore::UpdateLimitsLocked(absl::string_view path,
                                                  const Limits& limits,
                                                  bool oom_group) {
  absl::StatusOr<sqlite3_stmt*> find = PrepareLocked(
      kGenerationOf,
      "SELECT generation, creator FROM groups WHERE path = ?1");
  if (!find.ok()) return find.status();
  sqlite_rows::BindText(*find, 1, path);
  const int found = sqlite3_step(*find);
  // The creator stays (the row's checksum covers it).
  StoredGroup group{std::string(path), limits, 0, oom_group, std::string()};
  if (found == SQLITE_ROW) {
    group.generation = FromDb(sqlite3_column_int64(*find, 0));
    const void* creator = sqlite3_column_blob(*find, 1);
    if (creator != nullptr)
      group.creator.assign(static_cast<const char*>(creator),
                           static_cast<size_t>(sqlite3_column_bytes(*find, 1)));
  }
  sqlite3_reset(*find);
  if (found == SQLITE_DONE)
    return absl::NotFoundError(
        absl::StrCat("state store: ", path, " is not stored"));
  if (found != SQLITE_ROW) return ErrorLocked("setting limits");
  absl::StatusOr<sqlite3_stmt*> stmt = PrepareLocked(
      kUpdateLimits,
      "UPDATE groups SET max_pages = ?3, high_pages = ?4, min_pages = ?5, "
      "low_pages = ?6, checksum = ?7, oom_group = ?8 WHERE generation = ?1 "
      "AND path = ?2");
  if (!stmt.ok()) return stmt.status();
  sqlite_rows::BindGroupRow(*stmt, group);
  const int step = sqlite3_step(*stmt);
  sqlite3_reset(*stmt);
  if (step != SQLITE_DONE) return ErrorLocked("setting limits");
  return absl::OkStatus();
}

absl::Status SqliteStateStore::DeleteGroup(absl::string_view path) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = BeginGroupChangeLocked(); !s.ok()) return s;
  return EndGroupChangeLocked(DeleteGroupRowLocked(path));
}

absl::Status SqliteStateStore::DeleteGroupRowLocked(absl::string_view path) {
  absl::StatusOr<sqlite3_stmt*> stmt =
      PrepareLocked(kDeleteGroup, "DELETE FROM groups WHERE path = ?1");
  if (!stmt.ok()) return stmt.status();
  sqlite_rows::BindText(*stmt, 1, path);
  const int step = sqlite3_step(*stmt);
  sqlite3_reset(*stmt);
  if (step != SQLITE_DONE) return ErrorLocked("deleting a group");
  if (sqlite3_changes(db_) == 0)
    return absl::NotFoundError(
        absl::StrCat("state store: ", path, " is not stored"));
  return absl::OkStatus();
}

absl::Status SqliteStateStore::PutRequest(const StoredRequest& r,
                                          const WindowBounds& bounds) {
  constexpr absl::string_view kNotSaved =
      "answers of calls with a request_id or idempotency_key are not being "
      "saved: they are still answered, but a retry after a restart would be "
      "applied again";
  absl::MutexLock l(&mu_);
  if (absl::Status s = SyncLocked(false); !s.ok())
    return ReportLocked(s, kNotSaved);
  absl::StatusOr<sqlite3_stmt*> stmt =
      PrepareLocked(kPutRequest, sqlite_rows::kInsertRequestSql);
  if (!stmt.ok()) return ReportLocked(stmt.status(), kNotSaved);
  sqlite_rows::BindRequestRow(*stmt, r);
  const int step = sqlite3_step(*stmt);
  sqlite3_reset(*stmt);
  if (step != SQLITE_DONE)
    return ReportLocked(ErrorLocked("recording a request"), kNotSaved);
  Partition& p = partitions_[static_cast<int>(r.window())][r.identity];
  if (!p.counted) {
    // This identity's first put since the open (or since its partition
    // emptied): its rows already in the file count.
    if (absl::Status s = CountPartitionBytesLocked(r.window(), r.identity);
        !s.ok())
      return ReportLocked(s, kNotSaved);
  } else {
    p.bytes += r.stored_bytes();
  }
  if (++p.puts >= kPrunePuts ||
      (bounds.max_bytes != 0 && p.bytes > bounds.max_bytes)) {
    if (absl::Status s = PruneLocked(r.window(), r.identity, bounds);
        !s.ok()) {
      return ReportLocked(s,
                          "the window's old entries are not being dropped: "
                          "the file may grow past its bound");
    }
  }
  return absl::OkStatus();
}

absl::Status SqliteStateStore::CountPartitionBytesLocked(
    RequestWindow window, absl::string_view identity) {
  absl::StatusOr<sqlite3_stmt*> stmt =
      PrepareLocked(kWindowBytes,
                    "SELECT COALESCE(SUM(stored_bytes), 0) FROM requests WHERE "
                    "dedup_window = ?1 AND identity = ?2");
  if (!stmt.ok()) return stmt.status();
  sqlite3_bind_int(*stmt, 1, static_cast<int>(window));
  sqlite_rows::BindBlob(*stmt, 2, identity);
  const int step = sqlite3_step(*stmt);
  if (step == SQLITE_ROW) {
    Partition& p = partitions_[static_cast<int>(window)][identity];
    p.bytes = FromDb(sqlite3_column_int64(*stmt, 0));
    p.counted = true;
  }
  sqlite3_reset(*stmt);
  if (step != SQLITE_ROW) return ErrorLocked("counting a window's bytes");
  return absl::OkStatus();
}

absl::Status SqliteStateStore::ExpireLocked(int slot, const char* sql,
                                            RequestWindow window,
                                            int64_t argument,
                                            absl::string_view identity) {
  absl::StatusOr<sqlite3_stmt*> stmt = PrepareLocked(slot, sql);
  if (!stmt.ok()) return stmt.status();
  sqlite3_bind_int(*stmt, 1, static_cast<int>(window));
  sqlite3_bind_int64(*stmt, 2, argument);
  if (sqlite3_bind_parameter_count(*stmt) >= 3)
    sqlite_rows::BindBlob(*stmt, 3, identity);
  const int step = sqlite3_step(*stmt);
  sqlite3_reset(*stmt);
  if (step != SQLITE_DONE) return ErrorLocked("expiring requests");
  return absl::OkStatus();
}

absl::Status SqliteStateStore::PruneLocked(RequestWindow window,
                                           absl::string_view identity,
                                           const WindowBounds& bounds) {
  const int w = static_cast<int>(window);
  const int64_t changes_before = sqlite3_total_changes64(db_);
  // Age: every identity's, the window's.
  if (absl::Status s = ExpireLocked(
          kExpireOld,
          "DELETE FROM requests WHERE dedup_window = ?1 AND arrived < ?2",
          window, bounds.expire_before_unix_ns);
      !s.ok())
    return s;
  // Entries: the identity's newest `capacity` stay.
  if (bounds.capacity != 0) {
    if (absl::Status s = ExpireLocked(
            kExpireOverCapacity,
            "DELETE FROM requests WHERE dedup_window = ?1 AND identity = ?3 "
            "AND seq <= (SELECT seq FROM requests WHERE dedup_window = ?1 AND "
            "identity = ?3 ORDER BY seq DESC LIMIT 1 OFFSET ?2)",
            window, static_cast<int64_t>(bounds.capacity), identity);
        !s.ok())
      return s;
  }
  if (absl::Status s = CountPartitionBytesLocked(window, identity); !s.ok())
    return s;
  Partition& p = partitions_[w][identity];
  p.puts = 0;
  // Bytes: the identity's oldest go until the rest fit (its newest always
  // stays).
  if (bounds.max_bytes != 0 && p.bytes > bounds.max_bytes) {
    const uint64_t excess = p.bytes - bounds.max_bytes;
    absl::StatusOr<sqlite3_stmt*> oldest = PrepareLocked(
        kOldestOfWindow,
        "SELECT seq, stored_bytes FROM requests WHERE dedup_window = ?1 AND "
        "identity = ?2 AND seq < (SELECT MAX(seq) FROM requests WHERE "
        "dedup_window = ?1 AND identity = ?2) ORDER BY seq");
    if (!oldest.ok()) return oldest.status();
    sqlite3_bind_int(*oldest, 1, w);
    sqlite_rows::BindBlob(*oldest, 2, identity);
    uint64_t dropped = 0;
    int64_t last = -1;
    int step = SQLITE_DONE;
    while (dropped < excess && (step = sqlite3_step(*oldest)) == SQLITE_ROW) {
      last = sqlite3_column_int64(*oldest, 0);
      dropped += FromDb(sqlite3_column_int64(*oldest, 1));
    }
    sqlite3_reset(*oldest);
    if (step != SQLITE_ROW && step != SQLITE_DONE)
      return ErrorLocked("expiring requests");
    if (last >= 0) {
      if (absl::Status s = ExpireLocked(
              kExpireUpTo,
              "DELETE FROM requests WHERE dedup_window = ?1 AND identity = ?3 "
              "AND seq <= ?2",
              window, last, identity);
          !s.ok())
        return s;
      p.bytes -= std::min(dropped, p.bytes);
    }
  }
  if (p.bytes == 0) partitions_[w].erase(std::string(identity));
  if (sqlite3_total_changes64(db_) == changes_before) return absl::OkStatus();
  return VacuumLocked();
}

absl::Status SqliteStateStore::VacuumLocked() {
  int64_t free_pages = 0;
  int64_t pages = 0;
  for (auto [sql, out] :
       {std::pair<const char*, int64_t*>{"PRAGMA freelist_count", &free_pages},
        std::pair<const char*, int64_t*>{"PRAGMA page_count", &pages}}) {
    sqlite3_stmt* stmt = nullptr;
    sqlite3_prepare_v2(db_, sql, -1, &stmt, nullptr);
    if (sqlite3_step(stmt) == SQLITE_ROW) *out = sqlite3_column_int64(stmt, 0);
    sqlite3_finalize(stmt);
  }
  if (free_pages == 0 || free_pages * 4 < pages) return absl::OkStatus();
  return ExecLocked("PRAGMA incremental_vacuum");
}

}  // namespace cgacct
