-- Records of one shard queued in KEYS[1] (rsv: RESERVED; ut: committed in hot-only mode, not
-- yet in the outbox) with score <= ARGV[1], at most ARGV[2], whose value is still in state
-- ARGV[4] ('R' or 'C'). ARGV[3]: shard prefix. Fenced when ARGV[5] (holder) is not empty:
-- nothing is read unless the shard's lease (KEYS[2]) is (ARGV[5], ARGV[6] token), which a
-- success renews for ARGV[7] ms. Returns {member, value, member, value, ...}, or {'fenced'}.
if ARGV[5] ~= '' and fenced(KEYS[2], ARGV[5], ARGV[6], ARGV[7]) then return {'fenced'} end
local out = {}
for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])) do
  local p, seq = split_member(m)
  local v = redis.call('HGET', ARGV[3] .. 'm:' .. p, seq)
  if v and string.sub(v, 1, 1) == ARGV[4] then
    table.insert(out, m)
    table.insert(out, v)
  end
end
return out
