#include "server/idempotency/sqlite_state_store.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace cgacct {
namespace {

constexpr int kSchemaVersion = 1;

// Statement slots.
enum : int {
  kInsertGroup,
  kUpdateLimits,
  kDeleteGroup,
  kPutRequest,
  kExpireOld,
  kExpireOverCapacity,
};

constexpr const char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS groups (
  generation INTEGER PRIMARY KEY AUTOINCREMENT,
  path TEXT NOT NULL UNIQUE,
  max_pages INTEGER NOT NULL, high_pages INTEGER NOT NULL,
  min_pages INTEGER NOT NULL, low_pages INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS requests (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  identity BLOB NOT NULL, request_id BLOB NOT NULL, scope INTEGER NOT NULL,
  method INTEGER NOT NULL, path BLOB NOT NULL, nr_pages INTEGER NOT NULL,
  kind INTEGER NOT NULL, cpu INTEGER NOT NULL,
  code INTEGER NOT NULL, message BLOB NOT NULL,
  answer_nr_pages INTEGER NOT NULL, throttle_us INTEGER NOT NULL,
  body BLOB NOT NULL, arrived INTEGER NOT NULL, digest INTEGER NOT NULL,
  UNIQUE (identity, request_id, scope));
CREATE INDEX IF NOT EXISTS requests_arrived ON requests (arrived);
)sql";

// uint64 <-> SQLite's signed 64-bit integers, bit for bit.
int64_t ToDb(uint64_t v) {
  int64_t out;
  std::memcpy(&out, &v, sizeof(out));
  return out;
}
uint64_t FromDb(int64_t v) {
  uint64_t out;
  std::memcpy(&out, &v, sizeof(out));
  return out;
}

std::string ColumnBlob(sqlite3_stmt* stmt, int col) {
  const void* data = sqlite3_column_blob(stmt, col);
  const int n = sqlite3_column_bytes(stmt, col);
  return data == nullptr ? std::string()
                         : std::string(static_cast<const char*>(data),
                                       static_cast<size_t>(n));
}

void BindBlob(sqlite3_stmt* stmt, int col, absl::string_view bytes) {
  sqlite3_bind_blob(stmt, col, bytes.data(), static_cast<int>(bytes.size()),
                    SQLITE_TRANSIENT);
}

void BindLimits(sqlite3_stmt* stmt, int first_col, const Limits& limits) {
  sqlite3_bind_int64(stmt, first_col, ToDb(limits.max_pages));
  sqlite3_bind_int64(stmt, first_col + 1, ToDb(limits.high_pages));
  sqlite3_bind_int64(stmt, first_col + 2, ToDb(limits.min_pages));
  sqlite3_bind_int64(stmt, first_col + 3, ToDb(limits.low_pages));
}

}  // namespace

SqliteStateStore::SqliteStateStore(sqlite3* db, std::string path)
    : path_(std::move(path)), db_(db) {}

SqliteStateStore::~SqliteStateStore() {
  absl::MutexLock l(&mu_);
  for (sqlite3_stmt*& stmt : statements_) {
    if (stmt != nullptr) sqlite3_finalize(stmt);
    stmt = nullptr;
  }
  sqlite3_close(db_);
}

absl::StatusOr<std::unique_ptr<SqliteStateStore>> SqliteStateStore::Open(
    const std::string& dir, uint64_t page_size) {
  if (dir.empty())
    return absl::InvalidArgumentError("--state_dir must not be empty");
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::UnavailableError(absl::StrCat(
        "cannot create state directory ", dir, ": ", std::strerror(errno)));
  }
  const std::string file = absl::StrCat(dir, "/", kFileName);
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      file.c_str(), &db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
      nullptr);
  if (rc != SQLITE_OK) {
    std::string message =
        db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::UnavailableError(
        absl::StrCat("cannot open state store ", file, ": ", message));
  }
  std::unique_ptr<SqliteStateStore> store(new SqliteStateStore(db, file));
  absl::MutexLock l(&store->mu_);
  sqlite3_busy_timeout(db, 5000);
  // The check first: a corrupt file is refused before anything writes it.
  {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &stmt, nullptr) !=
        SQLITE_OK) {
      return absl::DataLossError(absl::StrCat(
          "state store ", file, " cannot be read: ", sqlite3_errmsg(db)));
    }
    std::string result;
    int step;
    while ((step = sqlite3_step(stmt)) == SQLITE_ROW) {
      if (!result.empty()) result += "; ";
      result += reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
    if (step != SQLITE_DONE || result != "ok") {
      return absl::DataLossError(
          absl::StrCat("state store ", file, " fails its check: ",
                       step != SQLITE_DONE ? sqlite3_errmsg(db) : result));
    }
  }
  {
    sqlite3_stmt* stmt = nullptr;
    std::string mode;
    if (sqlite3_prepare_v2(db, "PRAGMA journal_mode=WAL", -1, &stmt, nullptr) ==
            SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      mode = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
    if (mode != "wal") {
      return absl::UnavailableError(absl::StrCat(
          "state store ", file, ": cannot enable WAL journal (got \"", mode,
          "\"): ", sqlite3_errmsg(db)));
    }
  }
  if (absl::Status s = store->SyncLocked(true); !s.ok()) return s;
  if (absl::Status s = store->ExecLocked(kSchema); !s.ok()) return s;
  // meta: schema version and page size, written once, checked after.
  for (const auto& [key, value] :
       {std::pair<const char*, uint64_t>{"schema_version", kSchemaVersion},
        std::pair<const char*, uint64_t>{"page_size", page_size}}) {
    sqlite3_stmt* stmt = nullptr;
    sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = ?1", -1, &stmt,
                       nullptr);
    sqlite3_bind_text(stmt, 1, key, -1, SQLITE_STATIC);
    std::string stored;
    bool found = false;
    if (sqlite3_step(stmt) == SQLITE_ROW) {
      found = true;
      stored = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
    }
    sqlite3_finalize(stmt);
    if (!found) {
      sqlite3_prepare_v2(db, "INSERT INTO meta (key, value) VALUES (?1, ?2)",
                         -1, &stmt, nullptr);
      sqlite3_bind_text(stmt, 1, key, -1, SQLITE_STATIC);
      const std::string text = absl::StrCat(value);
      sqlite3_bind_text(stmt, 2, text.c_str(), -1, SQLITE_TRANSIENT);
      const int step = sqlite3_step(stmt);
      sqlite3_finalize(stmt);
      if (step != SQLITE_DONE) return store->ErrorLocked("writing meta");
      continue;
    }
    uint64_t parsed = 0;
    if (!absl::SimpleAtoi(stored, &parsed) || parsed != value) {
      return absl::FailedPreconditionError(
          absl::StrCat("state store ", file, " has ", key, "=", stored,
                       ", this cgacctd ", value,
                       (std::strcmp(key, "page_size") == 0
                            ? " (limits are stored in pages: start with "
                              "--page_size=" +
                                  stored + " or another --state_dir)"
                            : "")));
    }
  }
  return store;
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
  char* error = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    const std::string message = error != nullptr ? error : "unknown error";
    sqlite3_free(error);
    return absl::InternalError(
        absl::StrCat("state store ", path_, ": ", message));
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

absl::StatusOr<StateStore::Snapshot> SqliteStateStore::Load(
    int64_t requests_since_unix_ns) {
  absl::MutexLock l(&mu_);
  Snapshot snapshot;
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db_,
                         "SELECT generation, path, max_pages, high_pages, "
                         "min_pages, low_pages FROM groups ORDER BY generation",
                         -1, &stmt, nullptr) != SQLITE_OK) {
    return ErrorLocked("reading groups");
  }
  int step;
  while ((step = sqlite3_step(stmt)) == SQLITE_ROW) {
    StoredGroup group;
    group.generation = FromDb(sqlite3_column_int64(stmt, 0));
    group.path = ColumnBlob(stmt, 1);
    group.limits.max_pages = FromDb(sqlite3_column_int64(stmt, 2));
    group.limits.high_pages = FromDb(sqlite3_column_int64(stmt, 3));
    group.limits.min_pages = FromDb(sqlite3_column_int64(stmt, 4));
    group.limits.low_pages = FromDb(sqlite3_column_int64(stmt, 5));
    snapshot.groups.push_back(std::move(group));
  }
  sqlite3_finalize(stmt);
  if (step != SQLITE_DONE) return ErrorLocked("reading groups");

  if (absl::Status s = SyncLocked(true); !s.ok()) return s;
  sqlite3_prepare_v2(db_, "DELETE FROM requests WHERE arrived < ?1", -1, &stmt,
                     nullptr);
  sqlite3_bind_int64(stmt, 1, requests_since_unix_ns);
  step = sqlite3_step(stmt);
  sqlite3_finalize(stmt);
  if (step != SQLITE_DONE) return ErrorLocked("expiring requests");

  if (sqlite3_prepare_v2(
          db_,
          "SELECT identity, request_id, scope, method, path, nr_pages, kind, "
          "cpu, code, message, answer_nr_pages, throttle_us, body, arrived, "
          "digest "
          "FROM requests ORDER BY seq",
          -1, &stmt, nullptr) != SQLITE_OK) {
    return ErrorLocked("reading requests");
  }
  while ((step = sqlite3_step(stmt)) == SQLITE_ROW) {
    StoredRequest r;
    r.identity = ColumnBlob(stmt, 0);
    r.request_id = ColumnBlob(stmt, 1);
    r.scope = FromDb(sqlite3_column_int64(stmt, 2));
    r.method = sqlite3_column_int(stmt, 3);
    r.path = ColumnBlob(stmt, 4);
    r.nr_pages = FromDb(sqlite3_column_int64(stmt, 5));
    r.kind = sqlite3_column_int(stmt, 6);
    r.cpu = sqlite3_column_int64(stmt, 7);
    r.code = sqlite3_column_int(stmt, 8);
    r.message = ColumnBlob(stmt, 9);
    r.answer_nr_pages = FromDb(sqlite3_column_int64(stmt, 10));
    r.throttle_us = FromDb(sqlite3_column_int64(stmt, 11));
    r.body = ColumnBlob(stmt, 12);
    r.arrived_unix_ns = sqlite3_column_int64(stmt, 13);
    r.digest = FromDb(sqlite3_column_int64(stmt, 14));
    snapshot.requests.push_back(std::move(r));
  }
  sqlite3_finalize(stmt);
  if (step != SQLITE_DONE) return ErrorLocked("reading requests");
  return snapshot;
}

absl::StatusOr<uint64_t> SqliteStateStore::CreateGroup(absl::string_view path,
                                                       const Limits& limits) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = SyncLocked(true); !s.ok()) return s;
  absl::StatusOr<sqlite3_stmt*> stmt = PrepareLocked(
      kInsertGroup,
      "INSERT INTO groups (path, max_pages, high_pages, min_pages, low_pages) "
      "VALUES (?1, ?2, ?3, ?4, ?5)");
  if (!stmt.ok()) return stmt.status();
  sqlite3_bind_text(*stmt, 1, path.data(), static_cast<int>(path.size()),
                    SQLITE_TRANSIENT);
  BindLimits(*stmt, 2, limits);
  const int step = sqlite3_step(*stmt);
  sqlite3_reset(*stmt);
  if (step == SQLITE_CONSTRAINT)
    return absl::AlreadyExistsError(
        absl::StrCat("state store: ", path, " is stored"));
  if (step != SQLITE_DONE) return ErrorLocked("creating a group");
  return FromDb(sqlite3_last_insert_rowid(db_));
}

absl::Status SqliteStateStore::SetLimits(absl::string_view path,
                                         const Limits& limits) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = SyncLocked(true); !s.ok()) return s;
  absl::StatusOr<sqlite3_stmt*> stmt = PrepareLocked(
      kUpdateLimits,
      "UPDATE groups SET max_pages = ?2, high_pages = ?3, min_pages = ?4, "
      "low_pages = ?5 WHERE path = ?1");
  if (!stmt.ok()) return stmt.status();
  sqlite3_bind_text(*stmt, 1, path.data(), static_cast<int>(path.size()),
                    SQLITE_TRANSIENT);
  BindLimits(*stmt, 2, limits);
  const int step = sqlite3_step(*stmt);
  sqlite3_reset(*stmt);
  if (step != SQLITE_DONE) return ErrorLocked("setting limits");
  if (sqlite3_changes(db_) == 0)
    return absl::NotFoundError(
        absl::StrCat("state store: ", path, " is not stored"));
  return absl::OkStatus();
}

absl::Status SqliteStateStore::DeleteGroup(absl::string_view path) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = SyncLocked(true); !s.ok()) return s;
  absl::StatusOr<sqlite3_stmt*> stmt =
      PrepareLocked(kDeleteGroup, "DELETE FROM groups WHERE path = ?1");
  if (!stmt.ok()) return stmt.status();
  sqlite3_bind_text(*stmt, 1, path.data(), static_cast<int>(path.size()),
                    SQLITE_TRANSIENT);
  const int step = sqlite3_step(*stmt);
  sqlite3_reset(*stmt);
  if (step != SQLITE_DONE) return ErrorLocked("deleting a group");
  if (sqlite3_changes(db_) == 0)
    return absl::NotFoundError(
        absl::StrCat("state store: ", path, " is not stored"));
  return absl::OkStatus();
}

absl::Status SqliteStateStore::PutRequest(const StoredRequest& r,
                                          int64_t expire_before_unix_ns,
                                          size_t capacity) {
  absl::MutexLock l(&mu_);
  if (absl::Status s = SyncLocked(false); !s.ok()) return s;
  absl::StatusOr<sqlite3_stmt*> stmt = PrepareLocked(
      kPutRequest,
      "INSERT OR REPLACE INTO requests (identity, request_id, scope, method, "
      "path, nr_pages, kind, cpu, code, message, answer_nr_pages, "
      "throttle_us, body, arrived, digest) VALUES "
      "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)");
  if (!stmt.ok()) return stmt.status();
  BindBlob(*stmt, 1, r.identity);
  BindBlob(*stmt, 2, r.request_id);
  sqlite3_bind_int64(*stmt, 3, ToDb(r.scope));
  sqlite3_bind_int(*stmt, 4, r.method);
  BindBlob(*stmt, 5, r.path);
  sqlite3_bind_int64(*stmt, 6, ToDb(r.nr_pages));
  sqlite3_bind_int(*stmt, 7, r.kind);
  sqlite3_bind_int64(*stmt, 8, r.cpu);
  sqlite3_bind_int(*stmt, 9, r.code);
  BindBlob(*stmt, 10, r.message);
  sqlite3_bind_int64(*stmt, 11, ToDb(r.answer_nr_pages));
  sqlite3_bind_int64(*stmt, 12, ToDb(r.throttle_us));
  BindBlob(*stmt, 13, r.body);
  sqlite3_bind_int64(*stmt, 14, r.arrived_unix_ns);
  sqlite3_bind_int64(*stmt, 15, ToDb(r.digest));
  const int step = sqlite3_step(*stmt);
  sqlite3_reset(*stmt);
  if (step != SQLITE_DONE) return ErrorLocked("recording a request");
  // Expiry every 256 puts: the window's age and capacity bounds.
  if (++puts_ % 256 == 0) {
    absl::StatusOr<sqlite3_stmt*> old =
        PrepareLocked(kExpireOld, "DELETE FROM requests WHERE arrived < ?1");
    if (!old.ok()) return old.status();
    sqlite3_bind_int64(*old, 1, expire_before_unix_ns);
    int s = sqlite3_step(*old);
    sqlite3_reset(*old);
    if (s != SQLITE_DONE) return ErrorLocked("expiring requests");
    absl::StatusOr<sqlite3_stmt*> over =
        PrepareLocked(kExpireOverCapacity,
                      "DELETE FROM requests WHERE seq <= (SELECT MAX(seq) FROM "
                      "requests) - ?1");
    if (!over.ok()) return over.status();
    sqlite3_bind_int64(*over, 1, static_cast<int64_t>(capacity));
    s = sqlite3_step(*over);
    sqlite3_reset(*over);
    if (s != SQLITE_DONE) return ErrorLocked("expiring requests");
  }
  return absl::OkStatus();
}

}  // namespace cgacct
