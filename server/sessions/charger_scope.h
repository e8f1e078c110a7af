// The identity whose charge runs on the calling thread, for the network
// drain (SessionRegistry::DrainRemoteStock and RemoteDrainWouldWait, which
// the engine calls on the charging thread; docs/DESIGN.md §4.14).
//
// A drain waits for the answers of the charging caller's own sessions as it
// always did, and for other identities' sessions only while their stock
// there is not known empty (a session that answered with less than asked
// and has not refilled since): one tenant's client answering promptly with
// nothing, or a page at a time, would otherwise cost every refused charge
// of the others under a shared limit its answer time, for ever.
//
// Thread safety: thread-local; a scope is set and read on one thread.
#ifndef CGACCT_SERVER_SESSIONS_CHARGER_SCOPE_H_
#define CGACCT_SERVER_SESSIONS_CHARGER_SCOPE_H_

#include <string>

namespace cgacct {

// Sets the calling thread's charger identity for its lifetime (nests).
// `identity` must outlive the scope. Without a scope (limit writes, engine
// tests) the charger is unknown, and every session is waited for as before.
class ChargerScope {
 public:
  explicit ChargerScope(const std::string& identity) : saved_(current_) {
    current_ = &identity;
  }
  ~ChargerScope() { current_ = saved_; }
  ChargerScope(const ChargerScope&) = delete;
  ChargerScope& operator=(const ChargerScope&) = delete;

  // The identity of the innermost scope on this thread; null without one.
  static const std::string* Current() { return current_; }

 private:
  static inline thread_local const std::string* current_ = nullptr;
  const std::string* const saved_;
};

}  // namespace cgacct

#endif  // CGACCT_SERVER_SESSIONS_CHARGER_SCOPE_H_
