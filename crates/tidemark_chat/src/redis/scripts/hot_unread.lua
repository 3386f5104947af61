-- One atomic read: floor F, latest seq, and the committed unexpired messages above
-- max(read_seq, F) not sent by the user, and how many seqs above max(read_seq, F) have a record
-- in any state (`held`).
-- KEYS: conversation, messages, history index. ARGV: user, read_seq, now.
-- Returns {} for an unknown conversation, else {F, latest, unread, held}.
local st = redis.call('HMGET', KEYS[1], 'floor', 'latest')
if not st[2] then return {} end
local floor, latest, now = tonumber(st[1]), tonumber(st[2]), tonumber(ARGV[3])
local n = 0
local from = math.max(tonumber(ARGV[2]), floor) + 1
local s, v = next_visible(KEYS[3], KEYS[2], from, latest, now)
while s do
  local rec = cjson.decode(string.sub(v, string.find(v, '|', 1, true) + 1))
  if rec[2] ~= ARGV[1] then n = n + 1 end
  s, v = next_visible(KEYS[3], KEYS[2], s + 1, latest, now)
end
return {floor, latest, n, held(KEYS[2], from, latest)}
