-- The hierarchical charge of cgacct's page_counter, as a Redis Lua script:
-- the alternative a user would pick (tests/bench/redis_compare.sh).
--
-- KEYS[1..L]      usage counters, leaf first, root last (pages)
-- KEYS[L+1..2L]   memory.max of the same levels (pages)
-- ARGV[1]         pages: > 0 charges, < 0 uncharges
--
-- Charge: every level must stay at or under its max after the add (like
-- page_counter_try_charge(), usage == max allowed); if one would not, nothing
-- is charged and the script returns the 1-based level that failed, negated.
-- Uncharge: refused (returns 0) if the leaf holds fewer pages; else every
-- level is uncharged. Returns 1 on success. Redis runs a script atomically,
-- so "all levels or none" holds without rollback.
local n = tonumber(ARGV[1])
local levels = #KEYS / 2
if n > 0 then
  for i = 1, levels do
    local usage = tonumber(redis.call('GET', KEYS[i]) or '0')
    local max = tonumber(redis.call('GET', KEYS[levels + i]) or '0')
    if usage + n > max then
      return -i
    end
  end
else
  local leaf = tonumber(redis.call('GET', KEYS[1]) or '0')
  if leaf + n < 0 then
    return 0
  end
end
for i = 1, levels do
  redis.call('INCRBY', KEYS[i], n)
end
return 1
