-- Commit step 3 (seed 000 mark_published_and_committed), after the outbox append: COMMITTED,
-- hot history index (bit seq set), trim candidate. Idempotent: anything but a RESERVED record
-- is left alone.
-- KEYS: messages, history index, shard rsv, shard trim
-- ARGV: P, seq, trim score
local v = redis.call('HGET', KEYS[1], ARGV[2])
if not v or string.sub(v, 1, 1) ~= 'R' then return 0 end
redis.call('HSET', KEYS[1], ARGV[2], 'C' .. string.sub(v, 2))
redis.call('SETBIT', KEYS[2], ARGV[2], 1)
local member = ARGV[1] .. ARGV[2]
redis.call('ZREM', KEYS[3], member)
redis.call('ZADD', KEYS[4], ARGV[3], member)
return 1
