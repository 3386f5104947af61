-- One atomic read: floor F, latest seq, lowest committed unexpired seq above F (0 if none), and
-- the committed unexpired records with max(lo, F + 1) <= seq <= min(hi, latest).
-- KEYS: conversation, messages, history index. ARGV: lo, hi, now.
-- Returns {} for an unknown conversation, else {F, latest, earliest, seq, value, ...}.
local st = redis.call('HMGET', KEYS[1], 'floor', 'latest')
if not st[2] then return {} end
local floor, latest, now = tonumber(st[1]), tonumber(st[2]), tonumber(ARGV[3])
local out = {floor, latest, next_visible(KEYS[3], KEYS[2], floor + 1, latest, now) or 0}
local hi = math.min(tonumber(ARGV[2]), latest)
local s, v = next_visible(KEYS[3], KEYS[2], math.max(tonumber(ARGV[1]), floor + 1), hi, now)
while s do
  table.insert(out, tostring(s))
  table.insert(out, v)
  s, v = next_visible(KEYS[3], KEYS[2], s + 1, hi, now)
end
return out
