-- One atomic read: floor F, latest seq, and the committed unexpired messages above
-- max(read_seq, F) not sent by the user.
-- KEYS: conversation, messages, history index. ARGV: user, read_seq, now.
-- Returns {} for an unknown conversation, else {F, latest, unread}.
local st = redis.call('HMGET', KEYS[1], 'floor', 'latest')
if not st[2] then return {} end
local floor, now = tonumber(st[1]), tonumber(ARGV[3])
local from = math.max(tonumber(ARGV[2]), floor)
local n = 0
for _, s in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '(' .. from, '+inf')) do
  local v = redis.call('HGET', KEYS[2], s)
  if committed(v) and not expired(v, now) then
    local rec = cjson.decode(string.sub(v, string.find(v, '|', 1, true) + 1))
    if rec[2] ~= ARGV[1] then n = n + 1 end
  end
end
return {floor, tonumber(st[2]), n}
