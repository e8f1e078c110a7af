// WaitFor: polls a condition until it holds or a time limit passes, for
// tests of what a server does on its own threads (reapers, notifiers).
//
// Thread safety: a function of its arguments; `done` is called on the
// calling thread only.
#ifndef CGACCT_TESTS_SERVER_WAIT_FOR_H_
#define CGACCT_TESTS_SERVER_WAIT_FOR_H_

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cgacct::test_util {

// Waits (up to `limit`, polling every 5 ms) until `done()`; returns whether
// it became true.
template <typename Done>
bool WaitFor(absl::Duration limit, Done done) {
  const absl::Time end = absl::Now() + limit;
  while (!done()) {
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(5));
  }
  return true;
}

}  // namespace cgacct::test_util

#endif  // CGACCT_TESTS_SERVER_WAIT_FOR_H_
