// The database of SqliteStateStore (docs/DESIGN.md §4.12): its schema, each
// row's checksum, and the work on a whole file: reading every row with its
// check (Load(), and a rebuild), and a rebuild (a new file written from the
// rows of an old one: the upgrade from schemas 1 and 2, and --state_recover
// of a file that fails SQLite's check).
//
// Schema 3: meta (key, value, checksum); groups (generation, path, four
// limits in pages, checksum, memory.oom.group); requests (the StoredRequest fields, its
// RequestWindow, its stored_bytes(), checksum). A row's checksum is a 64-bit
// FNV-1a (StableDigest) over its table's name and its fields (integers as 8
// little-endian bytes, strings after their length), so any one byte changed
// in a field fails it; requests' seq is not covered (it only orders them).
//
// Thread safety: functions of a connection; the caller serialises its use.
#ifndef CGACCT_SERVER_IDEMPOTENCY_SQLITE_ROWS_H_
#define CGACCT_SERVER_IDEMPOTENCY_SQLITE_ROWS_H_

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/idempotency/state_store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace cgacct {
namespace sqlite_rows {

// 1: no checksums, one bound for both windows. 2: a checksum per row, the
// windows apart, the acknowledged group changes counted in meta. 3: groups
// keep memory.oom.group (column oom_group, covered by the row's checksum;
// a schema-2 row's checksum does not cover it and reads it as 0). 4:
// groups keep their creator (column creator: the identity a tenant's
// --max_groups_per_identity counts it against, empty for an admin's;
// covered by the checksum; rows before 4 read it as empty).
inline constexpr int kSchemaVersion = 4;

extern const char kSchema[];

// The checksum of a groups row as schema `version` writes and checks it
// (from 3 on it covers oom_group; a schema-2 row's does not), and of a meta
// row. For the store, and for tests that write an older schema's rows.
uint64_t GroupRowChecksum(const StoredGroup& g, int version);
uint64_t MetaRowChecksum(absl::string_view key, absl::string_view value);
// Statements, bound by the Bind*Row functions below.
extern const char kInsertGroupSql[];    // BindGroupRow
extern const char kInsertRequestSql[];  // BindRequestRow (or replace)
extern const char kPutMetaSql[];        // BindMetaRow (or replace)
// One row: the last generation ever handed out (never reused).
extern const char kLastGenerationSql[];

// uint64 <-> SQLite's signed 64-bit integers, bit for bit.
inline int64_t ToDb(uint64_t v) {
  int64_t out;
  std::memcpy(&out, &v, sizeof(out));
  return out;
}
inline uint64_t FromDb(int64_t v) {
  uint64_t out;
  std::memcpy(&out, &v, sizeof(out));
  return out;
}

void BindText(sqlite3_stmt* stmt, int col, absl::string_view text);
void BindBlob(sqlite3_stmt* stmt, int col, absl::string_view bytes);
void BindGroupRow(sqlite3_stmt* stmt, const StoredGroup& group);
void BindRequestRow(sqlite3_stmt* stmt, const StoredRequest& request);
void BindMetaRow(sqlite3_stmt* stmt, absl::string_view key,
                 absl::string_view value);

// "groups row generation 7 (path "/a")", for messages.
std::string Describe(const StoredGroup& group);

// A sqlite3 connection, closed on destruction unless released.
class Connection {
 public:
  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();
  sqlite3* get() const { return db_; }
  sqlite3* release() { return std::exchange(db_, nullptr); }
  void reset();

  // Opens (creating it if missing) `file`, read-write, with a 5 s busy
  // timeout. Errors: UNAVAILABLE naming the file.
  absl::Status Open(const std::string& file);

 private:
  sqlite3* db_ = nullptr;
};

// Runs `sql` on `db` (no results). Errors: INTERNAL naming `file`.
absl::Status Exec(sqlite3* db, const std::string& file, const char* sql);

// PRAGMA quick_check: OK, or DATA_LOSS saying what it found.
absl::Status QuickCheck(sqlite3* db, const std::string& file);

// The file's schema version; 0 for a new, empty database. Errors:
// DATA_LOSS when meta cannot be read or holds no version.
absl::StatusOr<int> SchemaVersion(sqlite3* db, const std::string& file);

// Makes the next group generation at least `last` + 1.
absl::Status RaiseLastGeneration(sqlite3* db, const std::string& file,
                                 uint64_t last);

// A row that fails its checksum (or could not be kept).
struct DamagedRow {
  const char* table = "";  // "meta", "groups" or "requests"
  int64_t rowid = 0;       // meta: unused
  std::string what;        // for messages: Describe()'s words
};

// What a file holds: the rows that pass their checksum (schema 1: all), the
// ones that fail, and the tables that could not be read to their end.
struct Rows {
  std::vector<std::pair<std::string, std::string>> meta;  // key, value
  std::optional<uint64_t> last_generation;                // absent: unreadable
  std::vector<StoredGroup> groups;                        // creation order
  std::vector<StoredRequest> requests;                    // oldest first
  std::vector<DamagedRow> damaged;
  std::vector<std::string> unreadable;  // "groups after 12 rows: <error>"

  // The value of meta row `key`, if it is there (and passes its checksum).
  const std::string* Meta(absl::string_view key) const;
  // The same as a number, if it is one.
  std::optional<uint64_t> MetaNumber(absl::string_view key) const;
};

// Reads meta (schema `version`) into `rows`.
void ReadMeta(sqlite3* db, int version, Rows* rows);
// Reads the last generation, the groups and the requests (schema
// `version`) into `rows`.
void ReadGroupsAndRequests(sqlite3* db, int version, Rows* rows);

// Removes from `groups` (creation order) the groups whose parent is not in
// it (the engine could not re-create them) and returns them.
std::vector<StoredGroup> TakeOrphans(std::vector<StoredGroup>& groups);

// Replaces database `file` in `dir` (open on `src`, schema `version`) by a
// schema-3 copy of the rows that can be read and pass their checksums (and
// are not orphans): written and synced to FILE.new, then the old file and
// its WAL are moved to `aside` (or removed, when `aside` is empty: an
// upgrade) and FILE.new takes its place. `page_size_bytes` stands in for an
// unreadable stored page size. Appends to `notes` what was dropped (an
// upgrade drops nothing). Closes `src`. Errors: I/O, naming the file.
absl::Status Rebuild(const std::string& dir, const std::string& file,
                     Connection& src, int version, uint64_t page_size_bytes,
                     const std::string& aside, std::vector<std::string>* notes);

// Finishes or forgets a Rebuild() of `file` in `dir` that a crash
// interrupted: a complete FILE.new (the old file already moved away) takes
// its place; an incomplete one (the old file still there) is removed.
absl::Status FinishInterruptedRebuild(const std::string& dir,
                                      const std::string& file);

}  // namespace sqlite_rows
}  // namespace cgacct

#endif  // CGACCT_SERVER_IDEMPOTENCY_SQLITE_ROWS_H_
