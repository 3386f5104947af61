-- One atomic read: floor F, latest seq, lowest committed unexpired seq above F (0 if none), and
-- the committed unexpired records with max(lo, F + 1) <= seq <= min(hi, latest), and how many
-- seqs of that range have a record in any state (`held`).
-- KEYS: conversation, messages, history index. ARGV: lo, hi, now.
-- Returns {} for an unknown conversation, else {F, latest, earliest, held, seq, value, ...}.
local st = redis.call('HMGET', KEYS[1], 'floor', 'latest')
if not st[2] then return {} end
local floor, latest, now = tonumber(st[1]), tonumber(st[2]), tonumber(ARGV[3])
local out = {floor, latest, next_visible(KEYS[3], KEYS[2], floor + 1, latest, now) or 0}
local lo, hi = math.max(tonumber(ARGV[1]), floor + 1), math.min(tonumber(ARGV[2]), latest)
table.insert(out, held(KEYS[2], lo, hi))
local s, v = next_visible(KEYS[3], KEYS[2], lo, hi, now)
while s do
  table.insert(out, tostring(s))
  table.insert(out, v)
  s, v = next_visible(KEYS[3], KEYS[2], s + 1, hi, now)
end
return out
