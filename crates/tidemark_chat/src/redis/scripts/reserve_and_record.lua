-- Commit step 1 (seed 000 reserve_and_record): dedup lookup, seq allocation, record RESERVED.
-- KEYS: conversation, messages, dedup, shard rsv, shard dx, shard count
-- ARGV: P, dedup field, now, dedup expiry, expiry digits, record json, message id
-- Returns {'unknown'} | {'committed', seq, committed_at, message_id}
--       | {'reserved', seq, value} (an earlier try, still RESERVED) | {'fresh', seq}
if redis.call('EXISTS', KEYS[1]) == 0 then return {'unknown'} end
local now = tonumber(ARGV[3])
local dd = redis.call('HGET', KEYS[3], ARGV[2])
if dd then
  local seq, at, exp, mid = string.match(dd, '^(%d+)|(%-?%d+)|(%-?%d+)|(.*)$')
  if tonumber(exp) > now then
    local v = redis.call('HGET', KEYS[2], seq)
    if v and string.sub(v, 1, 1) == 'R' then return {'reserved', seq, v} end
    return {'committed', seq, at, mid}
  end
end
local seq = tostring(redis.call('HINCRBY', KEYS[1], 'latest', 1))
redis.call('HSET', KEYS[2], seq, 'R' .. ARGV[5] .. '|' .. ARGV[6])
redis.call('HSET', KEYS[3], ARGV[2], seq .. '|' .. ARGV[3] .. '|' .. ARGV[4] .. '|' .. ARGV[7])
redis.call('ZADD', KEYS[5], ARGV[4], ARGV[1] .. ARGV[2])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[1] .. seq)
redis.call('INCR', KEYS[6])
return {'fresh', seq}
