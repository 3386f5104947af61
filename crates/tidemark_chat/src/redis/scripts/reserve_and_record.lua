-- Commit step 1 (seed 000 reserve_and_record): dedup lookup, seq allocation, record RESERVED.
-- In hot-only mode (ARGV[8] = 'C', no outbox) the same call is the whole commit: the record is
-- written COMMITTED and put in the hot history index at once, with no trim candidate (nothing is
-- archived, so nothing may be trimmed); it goes in the shard's untracked queue instead, which a
-- tiered server later backfills into the outbox (recovery::backfill_untracked).
-- The record is dated `now` (ARGV[3]); if the conversation's latest message (field `at`) is
-- dated later, nothing is written and the caller tries again from that time: along a
-- conversation's seqs committed_at never decreases, whatever the clock of the node (HLC).
-- KEYS: conversation, messages, dedup, shard queue (rsv for 'R', ut for 'C'), shard dx,
--       shard count, history index
-- ARGV: P, dedup field, now, dedup expiry, expiry digits, record json, message id, state R|C
-- Returns {'unknown'} | {'committed', seq, committed_at, message_id}
--       | {'reserved', seq, value} (an earlier try, still RESERVED) | {'fresh', seq}
--       | {'behind', at} (now is before the conversation's latest committed_at)
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
local at = redis.call('HGET', KEYS[1], 'at')
if at and tonumber(at) > now then return {'behind', at} end
local state = ARGV[8]
local seq = tostring(redis.call('HINCRBY', KEYS[1], 'latest', 1))
redis.call('HSET', KEYS[1], 'at', ARGV[3])
redis.call('HSET', KEYS[2], seq, state .. ARGV[5] .. '|' .. ARGV[6])
redis.call('HSET', KEYS[3], ARGV[2], seq .. '|' .. ARGV[3] .. '|' .. ARGV[4] .. '|' .. ARGV[7])
redis.call('ZADD', KEYS[5], ARGV[4], ARGV[1] .. ARGV[2])
redis.call('ZADD', KEYS[4], ARGV[3], ARGV[1] .. seq)
if state == 'C' then redis.call('SETBIT', KEYS[7], seq, 1) end
redis.call('INCR', KEYS[6])
return {'fresh', seq}
