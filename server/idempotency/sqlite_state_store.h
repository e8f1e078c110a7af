// SqliteStateStore: the StateStore in one SQLite database under --state_dir
// (docs/DESIGN.md §4.12), Debian's libsqlite3, WAL journal.
//
// Durability: group changes commit with synchronous=FULL (the WAL is fsynced
// before CreateGroup/SetLimits/DeleteGroup return: they survive a SIGKILL and
// a power loss); request-id entries commit with synchronous=NORMAL (in WAL
// mode: they survive a crash of the process, a power loss may forget the
// last ones).
//
// The state directory holds, beside DIR/cgacct.db (and its -wal, -shm):
// DIR/cgacct.lock, locked while the store is open (a second store on the
// directory is refused, naming the holder), and DIR/cgacct.acked, the count
// of acknowledged group changes (server/idempotency/state_dir.h; written
// after each change commits, synced when the store closes).
//
// Damage is detected, not repaired silently: every row carries a checksum
// (64-bit FNV-1a of its fields) verified by Load(); the file passes PRAGMA
// quick_check at Open(); a database holding fewer group changes than
// DIR/cgacct.acked says were acknowledged (a lost or damaged WAL) is
// refused at Open(). Options::recover starts from such a store anyway:
// rows that fail their checksum are dropped (with the groups below a
// dropped group), a file that fails quick_check is rebuilt from the rows
// that can still be read (the damaged file kept beside it), lost changes
// are accepted; recovery_notes() says what was done.
//
// Bounds: each de-duplication window is pruned to its own WindowBounds
// as PutRequest() is called: by age, and each caller identity's entries to
// their own count and bytes (one tenant's flood drops only its own rows); the file shrinks
// (auto_vacuum=INCREMENTAL, then PRAGMA incremental_vacuum once a quarter
// of it is free) and the WAL is truncated to 4 MiB after checkpoints
// (journal_size_limit).
//
// Thread safety: thread-safe; one connection, one mutex: calls are
// serialised, each is one transaction.
#ifndef CGACCT_SERVER_IDEMPOTENCY_SQLITE_STATE_STORE_H_
#define CGACCT_SERVER_IDEMPOTENCY_SQLITE_STATE_STORE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/idempotency/state_dir.h"
#include "server/idempotency/state_store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace cgacct {

class SqliteStateStore final : public StateStore {
 public:
  // The database file's name inside the state directory.
  static constexpr const char kFileName[] = "cgacct.db";

  struct Options {
    // The engine's page size in bytes: a store written with another page
    // size is refused (its limits are in pages).
    uint64_t page_size_bytes = 4096;
    // Start from a damaged store (--state_recover) instead of refusing it;
    // see the header comment.
    bool recover = false;
    // Told about a failed write (one line, no newline: what failed, the
    // error, what it means for clients), at most once per
    // `write_error_interval`; the failures in between are counted in the
    // next line. Called under the store's lock: do not call the store
    // from it. Null: not told.
    std::function<void(const std::string& line)> on_write_error;
    absl::Duration write_error_interval = absl::Seconds(10);
  };

  // Opens (creating it and `dir` if missing) `dir`/cgacct.db, taking the
  // directory's lock. A schema-1 store (before row checksums) is rewritten
  // as schema 2, its rows kept. Errors: FAILED_PRECONDITION another process
  // holds the directory (the message names its pid), the page size differs
  // or the schema is newer; DATA_LOSS the file fails quick_check, or holds
  // fewer group changes than were acknowledged, or DIR/cgacct.acked is
  // damaged or missing while the database records changes (each message
  // says what is damaged and how to proceed; not with options.recover);
  // UNAVAILABLE/INTERNAL for I/O errors (the message names the file).
  static absl::StatusOr<std::unique_ptr<SqliteStateStore>> Open(
      const std::string& dir, const Options& options);
  // Open() with default options but `page_size_bytes`.
  static absl::StatusOr<std::unique_ptr<SqliteStateStore>> Open(
      const std::string& dir, uint64_t page_size_bytes);

  ~SqliteStateStore() override;
  SqliteStateStore(const SqliteStateStore&) = delete;
  SqliteStateStore& operator=(const SqliteStateStore&) = delete;

  // Errors, beside the interface's: DATA_LOSS naming the first damaged
  // stored row (one that fails its checksum, or a group whose parent is not
  // stored) and how many are (not with Options::recover: those rows are
  // then deleted).
  absl::StatusOr<Snapshot> Load(int64_t requests_since_unix_ns) override
      ABSL_LOCKS_EXCLUDED(mu_);
  using StateStore::CreateGroup;
  absl::StatusOr<uint64_t> CreateGroup(absl::string_view path,
                                       const Limits& limits, bool oom_group,
                                       absl::string_view creator) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status SetLimits(absl::string_view path, const Limits& limits,
                         bool oom_group) override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status DeleteGroup(absl::string_view path) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status PutRequest(const StoredRequest& request,
                          const WindowBounds& bounds) override
      ABSL_LOCKS_EXCLUDED(mu_);

  // What recovery (Options::recover) did at Open() and Load(), a sentence
  // each; empty when nothing was damaged.
  std::vector<std::string> recovery_notes() const ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& path() const { return path_; }

 private:
  SqliteStateStore(sqlite3* db, std::string dir, std::string path,
                   Options options, StateDirLock lock, AckedChangesFile acked);

  // What DIR/cgacct.acked needs once the checks passed.
  enum class AckedRepair {
    kNone,        // it agrees with the database
    kInitialize,  // new, or rewritten from the database (recover)
    kRecord,      // behind the database by a crash: written
    kAcceptLost,  // ahead of it (recover): the lost changes accepted
  };

  // Open()'s steps after the database is open: meta and the
  // acknowledged-changes count checked (reading only), then WAL, schema,
  // what the checks found to write. `notes`: recovery so far.
  absl::Status InitializeLocked(std::vector<std::string> notes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The meta rows of a schema-`version` file (0: new) against this
  // cgacctd; sets group_changes_; `writes` gets the rows to write.
  absl::Status CheckMetaLocked(
      int version, std::vector<std::pair<std::string, std::string>>* writes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // DIR/cgacct.acked against group_changes_: a refusal (DATA_LOSS, not
  // with options_.recover) or what to write.
  absl::StatusOr<AckedRepair> CheckAckedLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RepairAckedLocked(AckedRepair repair)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `sql` (no results). Errors: INTERNAL with sqlite's message.
  absl::Status ExecLocked(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets PRAGMA synchronous to FULL (true) or NORMAL when it differs.
  absl::Status SyncLocked(bool full) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ErrorLocked(absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A cached prepared statement, reset.
  absl::StatusOr<sqlite3_stmt*> PrepareLocked(int slot, const char* sql)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A group change is one synchronous=FULL transaction: begun here, then
  // its statements, then ended by EndGroupChangeLocked(their status),
  // which counts one more acknowledged change in it, commits, and records
  // the count in DIR/cgacct.acked; a failed change is rolled back and
  // counts nothing. Failures other than NOT_FOUND and ALREADY_EXISTS are
  // reported (ReportLocked).
  absl::Status BeginGroupChangeLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status EndGroupChangeLocked(absl::Status change)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The statements of CreateGroup (sets group->generation), SetLimits and
  // DeleteGroup.
  absl::Status InsertGroupLocked(StoredGroup* group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status UpdateLimitsLocked(absl::string_view path, const Limits& limits,
                                  bool oom_group)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status DeleteGroupRowLocked(absl::string_view path)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes meta row `key` = `value` with its checksum.
  absl::Status PutMetaLocked(absl::string_view key, absl::string_view value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Per RequestWindow and caller identity: puts since its last pruning,
  // and its stored bytes (exact after a pruning; an upper bound in
  // between).
  struct Partition {
    uint64_t puts = 0;
    uint64_t bytes = 0;
    bool counted = false;  // `bytes` read from the file once
  };
  // Drops `window`'s entries older than `bounds` and `identity`'s beyond
  // its count and bytes, then frees the file's unused pages when a quarter
  // of it is free.
  absl::Status PruneLocked(RequestWindow window, absl::string_view identity,
                           const WindowBounds& bounds)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs cached statement `slot`, `sql`: a DELETE from `window` (?1) with
  // `argument` (?2) and `identity` (?3, when the statement names it).
  absl::Status ExpireLocked(int slot, const char* sql, RequestWindow window,
                            int64_t argument, absl::string_view identity = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Re-reads the stored bytes of `identity` in `window` (partitions_).
  absl::Status CountPartitionBytesLocked(RequestWindow window,
                                         absl::string_view identity)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status VacuumLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tells options_.on_write_error about `failed` (rate-limited), and
  // returns it.
  absl::Status ReportLocked(absl::Status failed, absl::string_view meaning)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const std::string dir_;
  const std::string path_;  // the database file
  const Options options_;

  mutable absl::Mutex mu_;
  sqlite3* const db_ ABSL_PT_GUARDED_BY(mu_);
  StateDirLock lock_ ABSL_GUARDED_BY(mu_);  // held until destruction
  AckedChangesFile acked_ ABSL_GUARDED_BY(mu_);
  // Cached statement slots (PrepareLocked).
  enum Statement : int {
    kLastGeneration,
    kInsertGroup,
    kGenerationOf,
    kUpdateLimits,
    kDeleteGroup,
    kPutMeta,
    kPutRequest,
    kExpireOld,
    kExpireOverCapacity,
    kWindowBytes,
    kOldestOfWindow,
    kExpireUpTo,
    kNrStatements,
  };
  sqlite3_stmt* statements_[kNrStatements] ABSL_GUARDED_BY(mu_) = {};
  int sync_full_ ABSL_GUARDED_BY(mu_) = -1;  // -1 unknown, 0 NORMAL, 1 FULL
  // Group changes committed (meta "group_changes").
  uint64_t group_changes_ ABSL_GUARDED_BY(mu_) = 0;
  // Per RequestWindow: identity -> its partition's counts. Bounded by the
  // identities that store entries (the policy's, or "" without access
  // control); a partition left without rows by a pruning goes.
  absl::flat_hash_map<std::string, Partition> partitions_[kNrRequestWindows]
      ABSL_GUARDED_BY(mu_);
  std::vector<std::string> notes_ ABSL_GUARDED_BY(mu_);
  // Write failures: when the last was reported, and how many since.
  absl::Time last_report_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  uint64_t unreported_failures_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_IDEMPOTENCY_SQLITE_STATE_STORE_H_
