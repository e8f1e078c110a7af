// SqliteStateStore's database: schema, checksums, rebuild
// (server/idempotency/sqlite_rows.h).
#include "server/idempotency/sqlite_rows.h"

#include <sqlite3.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/idempotency/dedup_cache.h"
#include "server/idempotency/state_dir.h"

namespace cgacct {
namespace sqlite_rows {

void BindBlob(sqlite3_stmt* stmt, int col, absl::string_view bytes) {
  sqlite3_bind_blob(stmt, col, bytes.data(), static_cast<int>(bytes.size()),
                    SQLITE_TRANSIENT);
}

const char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS meta (
  key TEXT PRIMARY KEY, value TEXT NOT NULL, checksum INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS groups (
  generation INTEGER PRIMARY KEY AUTOINCREMENT,
  path TEXT NOT NULL UNIQUE,
  max_pages INTEGER NOT NULL, high_pages INTEGER NOT NULL,
  min_pages INTEGER NOT NULL, low_pages INTEGER NOT NULL,
  checksum INTEGER NOT NULL, oom_group INTEGER NOT NULL DEFAULT 0,
  creator BLOB NOT NULL DEFAULT x'');
CREATE TABLE IF NOT EXISTS requests (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  identity BLOB NOT NULL, request_id BLOB NOT NULL, scope INTEGER NOT NULL,
  method INTEGER NOT NULL, path BLOB NOT NULL, nr_pages INTEGER NOT NULL,
  kind INTEGER NOT NULL, cpu INTEGER NOT NULL,
  code INTEGER NOT NULL, message BLOB NOT NULL,
  answer_nr_pages INTEGER NOT NULL, throttle_us INTEGER NOT NULL,
  body BLOB NOT NULL, arrived INTEGER NOT NULL, digest INTEGER NOT NULL,
  dedup_window INTEGER NOT NULL, stored_bytes INTEGER NOT NULL,
  checksum INTEGER NOT NULL,
  UNIQUE (dedup_window, identity, request_id, scope));
CREATE INDEX IF NOT EXISTS requests_by_window
  ON requests (dedup_window, seq, stored_bytes);
CREATE INDEX IF NOT EXISTS requests_by_age ON requests (dedup_window, arrived);
CREATE INDEX IF NOT EXISTS requests_by_identity
  ON requests (dedup_window, identity, seq, stored_bytes);
)sql";

const char kInsertGroupSql[] =
    "INSERT INTO groups (generation, path, max_pages, high_pages, min_pages, "
    "low_pages, checksum, oom_group, creator) VALUES (?1, ?2, ?3, ?4, ?5, ?6, "
    "?7, ?8, ?9)";
const char kInsertRequestSql[] =
    "INSERT OR REPLACE INTO requests (identity, request_id, scope, method, "
    "path, nr_pages, kind, cpu, code, message, answer_nr_pages, throttle_us, "
    "body, arrived, digest, dedup_window, stored_bytes, checksum) VALUES "
    "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, "
    "?17, ?18)";
const char kPutMetaSql[] =
    "INSERT OR REPLACE INTO meta (key, value, checksum) VALUES (?1, ?2, ?3)";
// AUTOINCREMENT's own choice: past the recorded sequence and every row.
const char kLastGenerationSql[] =
    "SELECT MAX(COALESCE((SELECT seq FROM sqlite_sequence WHERE name = "
    "'groups'), 0), COALESCE((SELECT MAX(generation) FROM groups), 0))";

namespace {

// The columns of a group and of a request, in ReadGroup's and ReadRequest's
// order (schema 1 has them all but oom_group, which schema 3 adds (read as
// 0 before it), and creator, which schema 4 adds (read as empty before it);
// schema 2 adds checksums and the window).
constexpr const char kGroupColumns[] =
    "generation, path, max_pages, high_pages, min_pages, low_pages, "
    "oom_group, creator";
constexpr const char kGroupColumnsBefore4[] =
    "generation, path, max_pages, high_pages, min_pages, low_pages, "
    "oom_group, x''";
constexpr const char kGroupColumnsBefore3[] =
    "generation, path, max_pages, high_pages, min_pages, low_pages, 0, x''";
constexpr int kNrGroupColumns = 8;
constexpr const char kRequestColumns[] =
    "identity, request_id, scope, method, path, nr_pages, kind, cpu, code, "
    "message, answer_nr_pages, throttle_us, body, arrived, digest";
constexpr int kNrRequestColumns = 15;

std::string ColumnBlob(sqlite3_stmt* stmt, int col) {
  const void* data = sqlite3_column_blob(stmt, col);
  const int n = sqlite3_column_bytes(stmt, col);
  return data == nullptr ? std::string()
                         : std::string(static_cast<const char*>(data),
                                       static_cast<size_t>(n));
}

// A row's checksum (see the header).
class RowChecksum {
 public:
  explicit RowChecksum(absl::string_view table) { Bytes(table); }
  RowChecksum& Int(uint64_t v) {
    char bytes[8];
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(v >> (8 * i));
    digest_ = StableDigest(absl::string_view(bytes, sizeof(bytes)), digest_);
    return *this;
  }
  RowChecksum& Bytes(absl::string_view bytes) {
    Int(bytes.size());
    digest_ = StableDigest(bytes, digest_);
    return *this;
  }
  uint64_t value() const { return digest_; }

 private:
  uint64_t digest_ = StableDigest("");
};

uint64_t ChecksumOf(const StoredRequest& r) {
  return RowChecksum("requests")
      .Bytes(r.identity)
      .Bytes(r.request_id)
      .Int(r.scope)
      .Int(static_cast<uint64_t>(r.method))
      .Bytes(r.path)
      .Int(r.nr_pages)
      .Int(static_cast<uint64_t>(r.kind))
      .Int(static_cast<uint64_t>(r.cpu))
      .Int(static_cast<uint64_t>(r.code))
      .Bytes(r.message)
      .Int(r.answer_nr_pages)
      .Int(r.throttle_us)
      .Bytes(r.body)
      .Int(static_cast<uint64_t>(r.arrived_unix_ns))
      .Int(r.digest)
      .value();
}


// Reads columns 0.. of `stmt` (kGroupColumns' order).
StoredGroup ReadGroup(sqlite3_stmt* stmt) {
  StoredGroup group;
  group.generation = FromDb(sqlite3_column_int64(stmt, 0));
  group.path = ColumnBlob(stmt, 1);
  group.limits.max_pages = FromDb(sqlite3_column_int64(stmt, 2));
  group.limits.high_pages = FromDb(sqlite3_column_int64(stmt, 3));
  group.limits.min_pages = FromDb(sqlite3_column_int64(stmt, 4));
  group.limits.low_pages = FromDb(sqlite3_column_int64(stmt, 5));
  group.oom_group = sqlite3_column_int64(stmt, 6) != 0;
  group.creator = ColumnBlob(stmt, 7);
  return group;
}

// Reads columns 0.. of `stmt` (kRequestColumns' order).
StoredRequest ReadRequest(sqlite3_stmt* stmt) {
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
  return r;
}

std::string Describe(int64_t seq, const StoredRequest& r) {
  return absl::StrCat("requests row seq ", seq, " (",
                      r.window() == RequestWindow::kIdempotencyKeys
                          ? "idempotency_key"
                          : "request_id",
                      " \"", absl::CHexEscape(r.request_id),
                      "\" of identity \"", absl::CHexEscape(r.identity), "\")");
}

// Steps `sql` on `db`, calling `row` for each row; a table that cannot be
// read to its end is said in rows->unreadable.
template <typename RowFn>
void ReadTable(sqlite3* db, absl::string_view table, const std::string& sql,
               Rows* rows, RowFn row) {
  sqlite3_stmt* stmt = nullptr;
  size_t read = 0;
  int step = SQLITE_ERROR;
  if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK) {
    while ((step = sqlite3_step(stmt)) == SQLITE_ROW) {
      ++read;
      row(stmt);
    }
  }
  if (step != SQLITE_DONE) {
    rows->unreadable.push_back(
        absl::StrCat(table, " after ", read, " rows: ", sqlite3_errmsg(db)));
  }
  sqlite3_finalize(stmt);
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

absl::Status Rename(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot rename ", from, " to ",
                                               to, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Writes `rows` into a new schema-3 database at `file` (journal_mode
// DELETE, synchronous FULL: complete and durable when this returns), with
// `page_size_bytes`, `group_changes` and the last generation `last`.
absl::Status WriteNewFile(const std::string& file, const Rows& rows,
                          uint64_t page_size_bytes, uint64_t group_changes,
                          uint64_t last) {
  std::remove(file.c_str());
  std::remove((file + "-journal").c_str());
  Connection db;
  if (absl::Status s = db.Open(file); !s.ok()) return s;
  for (const char* sql : {"PRAGMA auto_vacuum=INCREMENTAL",
                          "PRAGMA synchronous=FULL", kSchema, "BEGIN"}) {
    if (absl::Status s = Exec(db.get(), file, sql); !s.ok()) return s;
  }
  // Runs `sql` once per element of `items`, bound by `bind`.
  auto insert_all = [&](const char* sql, const auto& items, auto bind,
                        absl::string_view what) -> absl::Status {
    sqlite3_stmt* stmt = nullptr;
    int step = SQLITE_DONE;
    if (sqlite3_prepare_v2(db.get(), sql, -1, &stmt, nullptr) != SQLITE_OK)
      step = SQLITE_ERROR;
    for (const auto& item : items) {
      if (step != SQLITE_DONE) break;
      sqlite3_reset(stmt);
      bind(stmt, item);
      step = sqlite3_step(stmt);
    }
    sqlite3_finalize(stmt);
    if (step == SQLITE_DONE) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("state store ", file, ": writing ",
                                            what, ": ",
                                            sqlite3_errmsg(db.get())));
  };
  const std::vector<std::pair<std::string, std::string>> meta = {
      {"schema_version", absl::StrCat(kSchemaVersion)},
      {"page_size", absl::StrCat(page_size_bytes)},
      {"group_changes", absl::StrCat(group_changes)}};
  if (absl::Status s = insert_all(
          kPutMetaSql, meta,
          [](sqlite3_stmt* stmt, const auto& kv) {
            BindMetaRow(stmt, kv.first, kv.second);
          },
          "meta");
      !s.ok())
    return s;
  if (absl::Status s =
          insert_all(kInsertGroupSql, rows.groups, BindGroupRow, "groups");
      !s.ok())
    return s;
  if (absl::Status s = RaiseLastGeneration(db.get(), file, last); !s.ok())
    return s;
  if (absl::Status s = insert_all(kInsertRequestSql, rows.requests,
                                  BindRequestRow, "requests");
      !s.ok())
    return s;
  return Exec(db.get(), file, "COMMIT");
}

}  // namespace

uint64_t GroupRowChecksum(const StoredGroup& g, int version) {
  RowChecksum sum("groups");
  sum.Int(g.generation)
      .Bytes(g.path)
      .Int(g.limits.max_pages)
      .Int(g.limits.high_pages)
      .Int(g.limits.min_pages)
      .Int(g.limits.low_pages);
  if (version >= 3) sum.Int(g.oom_group ? 1 : 0);
  if (version >= 4) sum.Bytes(g.creator);
  return sum.value();
}

uint64_t MetaRowChecksum(absl::string_view key, absl::string_view value) {
  return RowChecksum("meta").Bytes(key).Bytes(value).value();
}

void BindText(sqlite3_stmt* stmt, int col, absl::string_view text) {
  sqlite3_bind_text(stmt, col, text.data(), static_cast<int>(text.size()),
                    SQLITE_TRANSIENT);
}

void BindGroupRow(sqlite3_stmt* stmt, const StoredGroup& g) {
  sqlite3_bind_int64(stmt, 1, ToDb(g.generation));
  BindText(stmt, 2, g.path);
  sqlite3_bind_int64(stmt, 3, ToDb(g.limits.max_pages));
  sqlite3_bind_int64(stmt, 4, ToDb(g.limits.high_pages));
  sqlite3_bind_int64(stmt, 5, ToDb(g.limits.min_pages));
  sqlite3_bind_int64(stmt, 6, ToDb(g.limits.low_pages));
  sqlite3_bind_int64(stmt, 7, ToDb(GroupRowChecksum(g, kSchemaVersion)));
  sqlite3_bind_int64(stmt, 8, g.oom_group ? 1 : 0);
  BindBlob(stmt, 9, g.creator);
}

void BindRequestRow(sqlite3_stmt* stmt, const StoredRequest& r) {
  BindBlob(stmt, 1, r.identity);
  BindBlob(stmt, 2, r.request_id);
  sqlite3_bind_int64(stmt, 3, ToDb(r.scope));
  sqlite3_bind_int(stmt, 4, r.method);
  BindBlob(stmt, 5, r.path);
  sqlite3_bind_int64(stmt, 6, ToDb(r.nr_pages));
  sqlite3_bind_int(stmt, 7, r.kind);
  sqlite3_bind_int64(stmt, 8, r.cpu);
  sqlite3_bind_int(stmt, 9, r.code);
  BindBlob(stmt, 10, r.message);
  sqlite3_bind_int64(stmt, 11, ToDb(r.answer_nr_pages));
  sqlite3_bind_int64(stmt, 12, ToDb(r.throttle_us));
  BindBlob(stmt, 13, r.body);
  sqlite3_bind_int64(stmt, 14, r.arrived_unix_ns);
  sqlite3_bind_int64(stmt, 15, ToDb(r.digest));
  sqlite3_bind_int(stmt, 16, static_cast<int>(r.window()));
  sqlite3_bind_int64(stmt, 17, static_cast<int64_t>(r.stored_bytes()));
  sqlite3_bind_int64(stmt, 18, ToDb(ChecksumOf(r)));
}

void BindMetaRow(sqlite3_stmt* stmt, absl::string_view key,
                 absl::string_view value) {
  BindText(stmt, 1, key);
  BindText(stmt, 2, value);
  sqlite3_bind_int64(stmt, 3, ToDb(MetaRowChecksum(key, value)));
}

std::string Describe(const StoredGroup& g) {
  return absl::StrCat("groups row generation ", g.generation, " (path \"",
                      absl::CHexEscape(g.path), "\")");
}

Connection::~Connection() { sqlite3_close(db_); }

void Connection::reset() { sqlite3_close(std::exchange(db_, nullptr)); }

absl::Status Connection::Open(const std::string& file) {
  reset();
  const int rc = sqlite3_open_v2(
      file.c_str(), &db_,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
      nullptr);
  if (rc != SQLITE_OK) {
    return absl::UnavailableError(absl::StrCat(
        "cannot open state store ", file, ": ",
        db_ != nullptr ? sqlite3_errmsg(db_) : sqlite3_errstr(rc)));
  }
  sqlite3_busy_timeout(db_, 5000);
  return absl::OkStatus();
}

absl::Status Exec(sqlite3* db, const std::string& file, const char* sql) {
  char* error = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &error) != SQLITE_OK) {
    const std::string message = error != nullptr ? error : sqlite3_errmsg(db);
    sqlite3_free(error);
    return absl::InternalError(
        absl::StrCat("state store ", file, ": ", message));
  }
  return absl::OkStatus();
}

absl::Status QuickCheck(sqlite3* db, const std::string& file) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &stmt, nullptr) !=
      SQLITE_OK) {
    return absl::DataLossError(absl::StrCat(
        "state store ", file, " cannot be read: ", sqlite3_errmsg(db)));
  }
  // The first three findings (it may list a hundred).
  std::string result;
  int findings = 0;
  int step;
  while ((step = sqlite3_step(stmt)) == SQLITE_ROW) {
    if (++findings > 3) continue;
    if (!result.empty()) result += "; ";
    result += ColumnBlob(stmt, 0);
  }
  if (findings > 3) absl::StrAppend(&result, "; ", findings - 3, " more");
  const std::string error = sqlite3_errmsg(db);
  sqlite3_finalize(stmt);
  if (step != SQLITE_DONE || result != "ok") {
    return absl::DataLossError(
        absl::StrCat("state store ", file, " fails SQLite's check (",
                     step != SQLITE_DONE ? error : result, ")"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> SchemaVersion(sqlite3* db, const std::string& file) {
  sqlite3_stmt* stmt = nullptr;
  int step = SQLITE_ERROR;
  if (sqlite3_prepare_v2(db,
                         "SELECT COUNT(*) FROM sqlite_master WHERE "
                         "type = 'table' AND name = 'meta'",
                         -1, &stmt, nullptr) == SQLITE_OK) {
    step = sqlite3_step(stmt);
  }
  const bool has_meta = step == SQLITE_ROW && sqlite3_column_int(stmt, 0) > 0;
  const std::string error = sqlite3_errmsg(db);
  sqlite3_finalize(stmt);
  if (step != SQLITE_ROW) {
    return absl::DataLossError(
        absl::StrCat("state store ", file, " cannot be read: ", error));
  }
  if (!has_meta) return 0;
  int version = -1;
  if (sqlite3_prepare_v2(db,
                         "SELECT value FROM meta WHERE key = 'schema_version'",
                         -1, &stmt, nullptr) == SQLITE_OK &&
      sqlite3_step(stmt) == SQLITE_ROW) {
    if (!absl::SimpleAtoi(ColumnBlob(stmt, 0), &version)) version = -1;
  }
  sqlite3_finalize(stmt);
  if (version < 1) {
    return absl::DataLossError(
        absl::StrCat("state store ", file, " has no readable schema_version"));
  }
  return version;
}

absl::Status RaiseLastGeneration(sqlite3* db, const std::string& file,
                                 uint64_t last) {
  sqlite3_stmt* stmt = nullptr;
  sqlite3_prepare_v2(db,
                     "UPDATE sqlite_sequence SET seq = MAX(seq, ?1) WHERE "
                     "name = 'groups'",
                     -1, &stmt, nullptr);
  sqlite3_bind_int64(stmt, 1, ToDb(last));
  int step = sqlite3_step(stmt);
  sqlite3_finalize(stmt);
  if (step == SQLITE_DONE && sqlite3_changes(db) == 0) {
    sqlite3_prepare_v2(
        db, "INSERT INTO sqlite_sequence (name, seq) VALUES ('groups', ?1)", -1,
        &stmt, nullptr);
    sqlite3_bind_int64(stmt, 1, ToDb(last));
    step = sqlite3_step(stmt);
    sqlite3_finalize(stmt);
  }
  if (step != SQLITE_DONE) {
    return absl::InternalError(
        absl::StrCat("state store ", file,
                     ": setting the next generation: ", sqlite3_errmsg(db)));
  }
  return absl::OkStatus();
}

const std::string* Rows::Meta(absl::string_view key) const {
  for (const auto& [k, v] : meta)
    if (k == key) return &v;
  return nullptr;
}

std::optional<uint64_t> Rows::MetaNumber(absl::string_view key) const {
  const std::string* value = Meta(key);
  uint64_t number = 0;
  if (value == nullptr || !absl::SimpleAtoi(*value, &number))
    return std::nullopt;
  return number;
}

void ReadMeta(sqlite3* db, int version, Rows* rows) {
  const bool checked = version >= 2;
  ReadTable(db, "meta",
            checked ? "SELECT key, value, checksum FROM meta"
                    : "SELECT key, value, 0 FROM meta",
            rows, [&](sqlite3_stmt* stmt) {
              std::string key = ColumnBlob(stmt, 0);
              std::string value = ColumnBlob(stmt, 1);
              if (checked && FromDb(sqlite3_column_int64(stmt, 2)) !=
                                 MetaRowChecksum(key, value)) {
                rows->damaged.push_back(DamagedRow{
                    "meta", 0,
                    absl::StrCat("meta row \"", absl::CHexEscape(key), "\"")});
                return;
              }
              rows->meta.emplace_back(std::move(key), std::move(value));
            });
}

void ReadGroupsAndRequests(sqlite3* db, int version, Rows* rows) {
  const bool checked = version >= 2;
  {
    sqlite3_stmt* stmt = nullptr;
    if (sqlite3_prepare_v2(db, kLastGenerationSql, -1, &stmt, nullptr) ==
            SQLITE_OK &&
        sqlite3_step(stmt) == SQLITE_ROW) {
      rows->last_generation = FromDb(sqlite3_column_int64(stmt, 0));
    }
    sqlite3_finalize(stmt);
  }
  ReadTable(db, "groups",
            absl::StrCat("SELECT ",
                         version >= 4   ? kGroupColumns
                         : version >= 3 ? kGroupColumnsBefore4
                                        : kGroupColumnsBefore3,
                         checked ? ", checksum" : "",
                         " FROM groups ORDER BY generation"),
            rows, [&](sqlite3_stmt* stmt) {
              StoredGroup g = ReadGroup(stmt);
              if (checked && FromDb(sqlite3_column_int64(stmt,
                                                         kNrGroupColumns)) !=
                                 GroupRowChecksum(g, version)) {
                rows->damaged.push_back(
                    DamagedRow{"groups", ToDb(g.generation), Describe(g)});
                return;
              }
              rows->groups.push_back(std::move(g));
            });
  ReadTable(
      db, "requests",
      absl::StrCat("SELECT ", kRequestColumns, ", seq",
                   checked ? ", dedup_window, stored_bytes, checksum" : "",
                   " FROM requests ORDER BY seq"),
      rows, [&](sqlite3_stmt* stmt) {
        StoredRequest r = ReadRequest(stmt);
        const int64_t seq = sqlite3_column_int64(stmt, kNrRequestColumns);
        const int c = kNrRequestColumns + 1;
        if (checked &&
            (sqlite3_column_int(stmt, c) != static_cast<int>(r.window()) ||
             FromDb(sqlite3_column_int64(stmt, c + 1)) != r.stored_bytes() ||
             FromDb(sqlite3_column_int64(stmt, c + 2)) != ChecksumOf(r))) {
          rows->damaged.push_back(
              DamagedRow{"requests", seq, Describe(seq, r)});
          return;
        }
        rows->requests.push_back(std::move(r));
      });
}

std::vector<StoredGroup> TakeOrphans(std::vector<StoredGroup>& groups) {
  absl::flat_hash_set<std::string> kept = {"/"};
  std::vector<StoredGroup> orphans;
  std::vector<StoredGroup> rest;
  for (StoredGroup& g : groups) {
    const size_t slash = g.path.rfind('/');
    const std::string parent = slash == 0 || slash == std::string::npos
                                   ? "/"
                                   : g.path.substr(0, slash);
    if (kept.contains(parent)) {
      kept.insert(g.path);
      rest.push_back(std::move(g));
    } else {
      orphans.push_back(std::move(g));
    }
  }
  groups = std::move(rest);
  return orphans;
}

absl::Status Rebuild(const std::string& dir, const std::string& file,
                     Connection& src, int version, uint64_t page_size_bytes,
                     const std::string& aside,
                     std::vector<std::string>* notes) {
  // Leave the old file as it is: no checkpoint into it when it closes.
  sqlite3_db_config(src.get(), SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1, nullptr);
  Rows rows;
  ReadMeta(src.get(), version, &rows);
  ReadGroupsAndRequests(src.get(), version, &rows);
  src.reset();
  uint64_t last = 0;
  for (const StoredGroup& g : rows.groups) last = std::max(last, g.generation);
  if (rows.last_generation.has_value()) {
    last = std::max(last, *rows.last_generation);
  } else {
    // The deleted groups' generations are unknown: skip far past them.
    last += uint64_t{1} << 20;
    notes->push_back(absl::StrCat(
        "the last generation used could not be read: new groups start at ",
        last + 1));
  }
  for (const StoredGroup& g : TakeOrphans(rows.groups)) {
    rows.damaged.push_back(DamagedRow{
        "groups", ToDb(g.generation),
        absl::StrCat(Describe(g), ", whose parent was not recovered")});
  }
  const std::optional<uint64_t> page_size = rows.MetaNumber("page_size");
  if (!page_size.has_value()) {
    notes->push_back(absl::StrCat(
        "the stored page size could not be read: taken as this cgacctd's ",
        page_size_bytes));
  }
  const std::string fresh = file + ".new";
  if (absl::Status s =
          WriteNewFile(fresh, rows, page_size.value_or(page_size_bytes),
                       rows.MetaNumber("group_changes").value_or(0), last);
      !s.ok())
    return s;
  const std::string wal = file + "-wal";
  const std::string aside_file = aside.empty() ? file + ".old" : aside;
  if (Exists(wal)) {
    if (absl::Status s = Rename(wal, aside_file + "-wal"); !s.ok()) return s;
  }
  if (absl::Status s = Rename(file, aside_file); !s.ok()) return s;
  std::remove((file + "-shm").c_str());
  if (absl::Status s = Rename(fresh, file); !s.ok()) return s;
  if (absl::Status s = SyncDirectory(dir); !s.ok()) return s;
  if (aside.empty()) {
    std::remove(aside_file.c_str());
    std::remove((aside_file + "-wal").c_str());
  } else {
    notes->push_back(absl::StrCat(
        "rebuilt ", file, " from the rows that could be read: ",
        rows.groups.size(), " groups and ", rows.requests.size(),
        " request entries kept; the damaged file is kept as ", aside));
  }
  for (const std::string& table : rows.unreadable)
    notes->push_back(absl::StrCat("unreadable past a point: ", table));
  if (!rows.damaged.empty()) {
    notes->push_back(absl::StrCat(
        rows.damaged.size(),
        " damaged row(s) dropped, the first: ", rows.damaged.front().what));
  }
  return absl::OkStatus();
}

absl::Status FinishInterruptedRebuild(const std::string& dir,
                                      const std::string& file) {
  const std::string fresh = file + ".new";
  if (!Exists(fresh)) return absl::OkStatus();
  if (Exists(file)) {
    std::remove(fresh.c_str());
    return absl::OkStatus();
  }
  if (absl::Status s = Rename(fresh, file); !s.ok()) return s;
  return SyncDirectory(dir);
}

}  // namespace sqlite_rows
}  // namespace cgacct
