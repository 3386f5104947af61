-- One atomic read: floor F, latest seq, lowest committed unexpired seq above F (0 if none), and
-- the committed unexpired records with max(lo, F + 1) <= seq <= hi.
-- KEYS: conversation, messages, history index. ARGV: lo, hi, now.
-- Returns {} for an unknown conversation, else {F, latest, earliest, seq, value, ...}.
local st = redis.call('HMGET', KEYS[1], 'floor', 'latest')
if not st[2] then return {} end
local floor, now = tonumber(st[1]), tonumber(ARGV[3])
local out = {floor, tonumber(st[2]), 0}
local offset = 0
repeat
  local seqs = redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. floor, '+inf', 'LIMIT', offset, 64)
  for _, s in ipairs(seqs) do
    local v = redis.call('HGET', KEYS[2], s)
    if committed(v) and not expired(v, now) then
      out[3] = tonumber(s)
      break
    end
  end
  offset = offset + 64
until out[3] ~= 0 or #seqs < 64
local lo = math.max(tonumber(ARGV[1]), floor + 1)
for _, s in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], lo, ARGV[2])) do
  local v = redis.call('HGET', KEYS[2], s)
  if committed(v) and not expired(v, now) then
    table.insert(out, s)
    table.insert(out, v)
  end
end
return out
