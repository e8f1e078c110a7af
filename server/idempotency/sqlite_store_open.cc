// SqliteStateStore (server/idempotency/sqlite_state_store.h): opening the
// state directory: the lock, the database's schema (created, checked or
// upgraded), and the acknowledged-changes file checked against it, with the
// repairs and the notes it leaves for the operator. The reads and writes of
// an open store are in sqlite_state_store.cc.
#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/idempotency/sqlite_rows.h"
#include "server/idempotency/sqlite_state_store.h"

namespace cgacct {
namespace {

using sqlite_rows::FromDb;
using sqlite_rows::kSchemaVersion;

// The WAL is truncated to this size after a checkpoint.
constexpr int64_t kWalLimitBytes = int64_t{4} << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteStateStore>> SqliteStateStore::Open(
    const std::string& dir, uint64_t page_size_bytes) {
  Options options;
  options.page_size_bytes = page_size_bytes;
  return Open(dir, options);
}

absl::StatusOr<std::unique_ptr<SqliteStateStore>> SqliteStateStore::Open(
    const std::string& dir, const Options& options) {
  if (dir.empty())
    return absl::InvalidArgumentError("--state_dir must not be empty");
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::UnavailableError(absl::StrCat(
        "cannot create state directory ", dir, ": ", std::strerror(errno)));
  }
  absl::StatusOr<StateDirLock> lock = StateDirLock::Acquire(dir);
  if (!lock.ok()) return lock.status();
  absl::StatusOr<AckedChangesFile> acked = AckedChangesFile::Open(dir);
  if (!acked.ok()) return acked.status();
  const std::string file = absl::StrCat(dir, "/", kFileName);
  if (absl::Status s = sqlite_rows::FinishInterruptedRebuild(dir, file);
      !s.ok())
    return s;
  std::vector<std::string> notes;
  sqlite_rows::Connection db;
  if (absl::Status s = db.Open(file); !s.ok()) return s;
  // Until the store is accepted, closing it must not checkpoint (a refused
  // store is left as it was found).
  sqlite3_db_config(db.get(), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  // The checks first: a damaged file is refused before anything writes it.
  const absl::Status check = sqlite_rows::QuickCheck(db.get(), file);
  const absl::StatusOr<int> version =
      sqlite_rows::SchemaVersion(db.get(), file);
  if (!check.ok() || !version.ok()) {
    const absl::Status& damage = !check.ok() ? check : version.status();
    if (!options.recover) {
      return absl::DataLossError(absl::StrCat(
          damage.message(),
          ". Start with --state_recover to rebuild it from the rows that can "
          "still be read (the damaged file is kept beside it), or move ",
          dir, " away to start empty"));
    }
    notes.push_back(std::string(damage.message()));
    const std::string aside =
        absl::StrCat(file, ".damaged-", absl::ToUnixSeconds(absl::Now()));
    if (absl::Status s = sqlite_rows::Rebuild(
            dir, file, db, version.ok() ? *version : kSchemaVersion,
            options.page_size_bytes, aside, &notes);
        !s.ok())
      return s;
  } else if (*version > kSchemaVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "state store ", file, " has schema_version=", *version,
        ", this cgacctd ", kSchemaVersion, " (written by a newer cgacctd)"));
  } else if (*version != 0 && *version < kSchemaVersion) {
    // An older schema: its rows copied into the current one.
    if (absl::Status s =
            sqlite_rows::Rebuild(dir, file, db, *version,
                                 options.page_size_bytes, /*aside=*/"", &notes);
        !s.ok())
      return s;
  }
  if (db.get() == nullptr) {
    if (absl::Status s = db.Open(file); !s.ok()) return s;
    sqlite3_db_config(db.get(), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  }
  std::unique_ptr<SqliteStateStore> store(new SqliteStateStore(
      db.release(), dir, file, options, *std::move(lock), *std::move(acked)));
  absl::MutexLock l(&store->mu_);
  if (absl::Status s = store->InitializeLocked(std::move(notes)); !s.ok())
    return s;
  sqlite3_db_config(store->db_, SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 0, nullptr);
  return store;
}

absl::Status SqliteStateStore::InitializeLocked(
    std::vector<std::string> notes) {
  notes_ = std::move(notes);
  // The checks first, reading only: a refused store is left as it was
  // found (a zeroed WAL included, which the first write would reset).
  const absl::StatusOr<int> version = sqlite_rows::SchemaVersion(db_, path_);
  if (!version.ok()) return version.status();
  std::vector<std::pair<std::string, std::string>> meta_writes;
  if (absl::Status s = CheckMetaLocked(*version, &meta_writes); !s.ok())
    return s;
  const absl::StatusOr<AckedRepair> repair = CheckAckedLocked();
  if (!repair.ok()) return repair.status();

  // Before WAL: auto_vacuum takes effect only on a database not yet
  // written (every schema-2 file is made so).
  if (absl::Status s = ExecLocked("PRAGMA auto_vacuum=INCREMENTAL"); !s.ok())
    return s;
  {
    sqlite3_stmt* stmt = nullptr;
    std::string mode;
    if (sqlite3_prepare_v2(db_, "PRAGMA journal_mode=WAL", -1, &stmt,
                           nullptr) == SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      mode = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
    if (mode != "wal") {
      return absl::UnavailableError(absl::StrCat(
          "state store ", path_, ": cannot enable WAL journal (got \"", mode,
          "\"): ", sqlite3_errmsg(db_)));
    }
  }
  const std::string wal_limit =
      absl::StrCat("PRAGMA journal_size_limit=", kWalLimitBytes);
  if (absl::Status s = ExecLocked(wal_limit.c_str()); !s.ok()) return s;
  if (absl::Status s = SyncLocked(true); !s.ok()) return s;
  if (absl::Status s = ExecLocked(sqlite_rows::kSchema); !s.ok()) return s;
  for (const auto& [key, value] : meta_writes) {
    if (absl::Status s = PutMetaLocked(key, value); !s.ok()) return s;
  }
  if (absl::Status s = RepairAckedLocked(*repair); !s.ok()) return s;
  // Each identity's bytes are read at its first put.
  for (auto& partitions : partitions_) partitions.clear();
  return absl::OkStatus();
}

absl::Status SqliteStateStore::CheckMetaLocked(
    int version, std::vector<std::pair<std::string, std::string>>* writes) {
  sqlite_rows::Rows rows;
  if (version != 0) {
    sqlite_rows::ReadMeta(db_, kSchemaVersion, &rows);
    if (!rows.unreadable.empty()) {
      return absl::DataLossError(absl::StrCat(
          "state store ", path_, ": cannot read ", rows.unreadable.front()));
    }
  }
  std::string damaged;
  for (const sqlite_rows::DamagedRow& row : rows.damaged)
    absl::StrAppend(&damaged, damaged.empty() ? "" : ", ", row.what);
  if (!damaged.empty()) {
    if (!options_.recover) {
      return absl::DataLossError(absl::StrCat(
          "state store ", path_, ": ", damaged,
          " fail(s) its checksum. Start with --state_recover to rewrite it "
          "from this cgacctd's settings, or move ",
          dir_, " away to start empty"));
    }
    notes_.push_back(absl::StrCat(damaged,
                                  " failed its checksum and was rewritten "
                                  "from this cgacctd's settings"));
  }
  // schema_version and page_size: written once, checked after.
  for (const auto& [key, value] :
       {std::pair<const char*, uint64_t>{"schema_version", kSchemaVersion},
        std::pair<const char*, uint64_t>{"page_size",
                                         options_.page_size_bytes}}) {
    const std::string* stored = rows.Meta(key);
    if (stored == nullptr) {
      writes->emplace_back(key, absl::StrCat(value));
      continue;
    }
    uint64_t parsed = 0;
    if (!absl::SimpleAtoi(*stored, &parsed) || parsed != value) {
      return absl::FailedPreconditionError(
          absl::StrCat("state store ", path_, " has ", key, "=", *stored,
                       ", this cgacctd ", value,
                       (std::strcmp(key, "page_size") == 0
                            ? " (limits are stored in pages: start with "
                              "--page_size=" +
                                  *stored + " or another --state_dir)"
                            : "")));
    }
  }
  const std::optional<uint64_t> changes = rows.MetaNumber("group_changes");
  if (changes.has_value()) {
    group_changes_ = *changes;
  } else {
    // A new file; or a damaged row (recover), then taken from cgacct.acked.
    group_changes_ = damaged.empty() ? 0 : acked_.count();
    writes->emplace_back("group_changes", absl::StrCat(group_changes_));
  }
  return absl::OkStatus();
}

absl::StatusOr<SqliteStateStore::AckedRepair>
SqliteStateStore::CheckAckedLocked() {
  std::string damage;
  switch (acked_.state()) {
    case AckedChangesFile::State::kMissing:
      if (group_changes_ == 0) return AckedRepair::kInitialize;
      damage = absl::StrCat(
          acked_.path(), " is missing, but the store records ", group_changes_,
          " acknowledged group changes (was the database copied or restored "
          "without it?)");
      break;
    case AckedChangesFile::State::kDamaged:
      damage = absl::StrCat(acked_.path(),
                            " is damaged (neither of its records passes its "
                            "checksum)");
      break;
    case AckedChangesFile::State::kValid:
      // Fewer: the process died between a commit and its record.
      if (acked_.count() < group_changes_) return AckedRepair::kRecord;
      if (acked_.count() == group_changes_) return AckedRepair::kNone;
      if (options_.recover) return AckedRepair::kAcceptLost;
      return absl::DataLossError(absl::StrCat(
          "state store ", path_, " records ", group_changes_,
          " group changes, but ", acked_.path(), " says ", acked_.count(),
          " were acknowledged: the last ", acked_.count() - group_changes_,
          " acknowledged creations, limit changes or deletions are missing "
          "(its write-ahead log ",
          path_,
          "-wal was lost, truncated or damaged, or the file was replaced by "
          "an older copy). Start with --state_recover to start from what it "
          "holds, or put ",
          dir_, " back from a backup"));
  }
  if (!options_.recover) {
    return absl::DataLossError(absl::StrCat(
        "state store ", path_, ": ", damage,
        ", so a loss of acknowledged group changes cannot be ruled out. "
        "Start with --state_recover to trust the database as it is, or put ",
        dir_, " back from a backup"));
  }
  notes_.push_back(absl::StrCat(damage, ": rewritten from the database"));
  return AckedRepair::kInitialize;
}

absl::Status SqliteStateStore::RepairAckedLocked(AckedRepair repair) {
  switch (repair) {
    case AckedRepair::kNone:
      return absl::OkStatus();
    case AckedRepair::kInitialize:
      return acked_.Initialize(group_changes_, dir_);
    case AckedRepair::kRecord:
      return acked_.Write(group_changes_);
    case AckedRepair::kAcceptLost:
      break;
  }
  const uint64_t lost = acked_.count() - group_changes_;
  // Generations the lost creations may have handed out are skipped.
  absl::StatusOr<sqlite3_stmt*> last =
      PrepareLocked(kLastGeneration, sqlite_rows::kLastGenerationSql);
  if (!last.ok()) return last.status();
  if (sqlite3_step(*last) != SQLITE_ROW)
    return ErrorLocked("reading the last generation");
  const uint64_t last_generation = FromDb(sqlite3_column_int64(*last, 0));
  sqlite3_reset(*last);
  if (absl::Status s =
          sqlite_rows::RaiseLastGeneration(db_, path_, last_generation + lost);
      !s.ok())
    return s;
  group_changes_ = acked_.count();
  if (absl::Status s =
          PutMetaLocked("group_changes", absl::StrCat(group_changes_));
      !s.ok())
    return s;
  notes_.push_back(absl::StrCat(
      lost, " acknowledged group changes were missing from ", path_,
      " (a lost or damaged write-ahead log): started from the groups it "
      "holds; new groups get generations none of them could have used"));
  return absl::OkStatus();
}

std::vector<std::string> SqliteStateStore::recovery_notes() const {
  absl::MutexLock l(&mu_);
  return notes_;
}

}  // namespace cgacct
