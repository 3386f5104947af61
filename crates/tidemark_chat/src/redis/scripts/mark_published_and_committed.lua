-- Commit step 3 (seed 000 mark_published_and_committed), after the outbox append: COMMITTED,
-- hot history index (bit seq set), trim candidate. Idempotent: anything but a RESERVED record
-- is left alone. The commit time is `now` or the shard's clock floor if that is later, and
-- raises the floor (HotStore::raise_clock_floor): a candidate is never scored below a watermark
-- T0 the archiver raised the floor to before it read the outbox's end.
-- KEYS: messages, history index, shard rsv, shard trim, shard clock floor
-- ARGV: P, seq, now, hot window
local v = redis.call('HGET', KEYS[1], ARGV[2])
if not v or string.sub(v, 1, 1) ~= 'R' then return 0 end
redis.call('HSET', KEYS[1], ARGV[2], 'C' .. string.sub(v, 2))
redis.call('SETBIT', KEYS[2], ARGV[2], 1)
local member = ARGV[1] .. ARGV[2]
redis.call('ZREM', KEYS[3], member)
local t = commit_time(KEYS[5], ARGV[3])
redis.call('ZADD', KEYS[4], string.format('%d', t + tonumber(ARGV[4])), member)
return 1
