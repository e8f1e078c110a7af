// Helpers for the stock tests: which groups a refill evicted from their
// slots. A full stock gives up a random slot (refill_stock()), so the tests
// find the victim instead of assuming one.
#ifndef CGACCT_TESTS_ENGINE_STOCK_TEST_UTIL_H_
#define CGACCT_TESTS_ENGINE_STOCK_TEST_UTIL_H_

#include <memory>
#include <vector>

#include "engine/stock.h"

namespace cgacct {

// Whether `counter` has pages in one of `cpu`'s 7 slots (not in its victim
// table, not gone).
inline bool InSlot(const MemcgStock& stock, int cpu, const PageCounter* counter) {
  return stock.StockedPages(cpu, counter) > 0 &&
         stock.VictimPages(cpu, counter) == 0;
}

// The indexes of the first `n` of `groups` that have no pages in a slot of
// `cpu`: the ones evicted, into the victim table or off the CPU.
inline std::vector<int> NotInSlots(
    const MemcgStock& stock, int cpu,
    const std::vector<std::unique_ptr<PageCounter>>& groups, int n) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i)
    if (!InSlot(stock, cpu, groups[i].get())) out.push_back(i);
  return out;
}

}  // namespace cgacct

#endif  // CGACCT_TESTS_ENGINE_STOCK_TEST_UTIL_H_
