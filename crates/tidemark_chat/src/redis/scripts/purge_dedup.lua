-- Drops up to ARGV[2] dedup entries of one shard that expired at ARGV[1].
-- KEYS: shard dx. ARGV[3]: shard prefix. Returns how many.
local members = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, m in ipairs(members) do
  local p, field = split_member(m)
  redis.call('HDEL', ARGV[3] .. 'd:' .. p, field)
  redis.call('ZREM', KEYS[1], m)
end
return #members
