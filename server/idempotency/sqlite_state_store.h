// SqliteStateStore: the StateStore in one SQLite database under --state_dir
// (docs/DESIGN.md §4.12), Debian's libsqlite3, WAL journal.
//
// Durability: group changes commit with synchronous=FULL (the WAL is fsynced
// before CreateGroup/SetLimits/DeleteGroup return: they survive a SIGKILL and
// a power loss); request-id entries commit with synchronous=NORMAL (in WAL
// mode: they survive a crash of the process, a power loss may forget the
// last ones). The database is checked (PRAGMA quick_check) when opened.
//
// Thread safety: thread-safe; one connection, one mutex: calls are
// serialised, each is one transaction.
#ifndef CGACCT_SERVER_IDEMPOTENCY_SQLITE_STATE_STORE_H_
#define CGACCT_SERVER_IDEMPOTENCY_SQLITE_STATE_STORE_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/idempotency/state_store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace cgacct {

class SqliteStateStore final : public StateStore {
 public:
  // The database file's name inside the state directory.
  static constexpr const char kFileName[] = "cgacct.db";

  // Opens (creating it and `dir` if missing) `dir`/cgacct.db. `page_size` is
  // the engine's page size in bytes: a store written with another page size
  // is refused (its limits are in pages). Errors: FAILED_PRECONDITION page
  // size differs or the schema is newer; DATA_LOSS the database fails its
  // check; INTERNAL/UNAVAILABLE for I/O errors (message names the file).
  static absl::StatusOr<std::unique_ptr<SqliteStateStore>> Open(
      const std::string& dir, uint64_t page_size);

  ~SqliteStateStore() override;
  SqliteStateStore(const SqliteStateStore&) = delete;
  SqliteStateStore& operator=(const SqliteStateStore&) = delete;

  absl::StatusOr<Snapshot> Load(int64_t requests_since_unix_ns) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<uint64_t> CreateGroup(absl::string_view path,
                                       const Limits& limits) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SetLimits(absl::string_view path, const Limits& limits) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status DeleteGroup(absl::string_view path) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status PutRequest(const StoredRequest& request,
                          int64_t expire_before_unix_ns,
                          size_t capacity) override ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& path() const { return path_; }

 private:
  SqliteStateStore(sqlite3* db, std::string path);

  // Runs `sql` (no results). Errors: INTERNAL with sqlite's message.
  absl::Status ExecLocked(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets PRAGMA synchronous to FULL (true) or NORMAL when it differs.
  absl::Status SyncLocked(bool full) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ErrorLocked(absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A cached prepared statement, reset.
  absl::StatusOr<sqlite3_stmt*> PrepareLocked(int slot, const char* sql)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;  // the database file; constant
  absl::Mutex mu_;
  sqlite3* const db_ ABSL_PT_GUARDED_BY(mu_);
  static constexpr int kNrStatements = 8;
  sqlite3_stmt* statements_[kNrStatements] ABSL_GUARDED_BY(mu_) = {};
  int sync_full_ ABSL_GUARDED_BY(mu_) = -1;  // -1 unknown, 0 NORMAL, 1 FULL
  uint64_t puts_ ABSL_GUARDED_BY(mu_) = 0;   // PutRequest calls (expiry pace)
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_IDEMPOTENCY_SQLITE_STATE_STORE_H_
