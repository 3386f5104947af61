-- One atomic read: floor F, latest seq, lowest committed unexpired seq above F (0 if none), and
-- the committed unexpired records with max(lo, F + 1) <= seq <= min(hi, latest).
-- KEYS: conversation, messages, history index. ARGV: lo, hi, now.
-- Returns {} for an unknown conversation, else {F, latest, earliest, seq, value, ...}.
local st = redis.call('HMGET', KEYS[1], 'floor', 'latest')
if not st[2] then return {} end
local floor, latest, now = tonumber(st[1]), tonumber(st[2]), tonumber(ARGV[3])
local out = {floor, latest, 0}
local s = next_indexed(KEYS[3], floor + 1, latest)
while s do
  local v = redis.call('HGET', KEYS[2], s)
  if committed(v) and not expired(v, now) then
    out[3] = s
    break
  end
  s = next_indexed(KEYS[3], s + 1, latest)
end
local hi = math.min(tonumber(ARGV[2]), latest)
s = next_indexed(KEYS[3], math.max(tonumber(ARGV[1]), floor + 1), hi)
while s do
  local v = redis.call('HGET', KEYS[2], s)
  if committed(v) and not expired(v, now) then
    table.insert(out, tostring(s))
    table.insert(out, v)
  end
  s = next_indexed(KEYS[3], s + 1, hi)
end
return out
