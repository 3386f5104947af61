-- Trims up to ARGV[2] candidates of one shard with score <= ARGV[1]: deletes record and index
-- entry and raises the conversation's floor F = max(F, seq). Keys of the conversations are
-- built from the shard prefix ARGV[3]; they share the shard's hash tag, hence its slot.
-- Fenced: nothing is done unless the shard's lease is (ARGV[4] holder, ARGV[5] token), which a
-- success renews for ARGV[6] ms.
-- KEYS: shard trim, shard count, shard lease. Returns the trimmed members, or {'fenced'}.
if fenced(KEYS[3], ARGV[4], ARGV[5], ARGV[6]) then return {'fenced'} end
local members = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, m in ipairs(members) do
  local p, seq = split_member(m)
  redis.call('HDEL', ARGV[3] .. 'm:' .. p, seq)
  redis.call('SETBIT', ARGV[3] .. 'h:' .. p, seq, 0)
  local c = ARGV[3] .. 'c:' .. p
  if tonumber(seq) > tonumber(redis.call('HGET', c, 'floor') or '0') then
    redis.call('HSET', c, 'floor', seq)
  end
  redis.call('ZREM', KEYS[1], m)
  redis.call('DECR', KEYS[2])
end
return members
