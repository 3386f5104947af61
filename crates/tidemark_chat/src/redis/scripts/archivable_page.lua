-- A page of one shard's trim candidates (COMMITTED records the outbox carried), in the order
-- of the candidate set: by score, then member (Redis orders equal scores by member). Starts
-- after (ARGV[2] score, ARGV[3] member), or at the first with ARGV[2] = ''. Candidates trimmed
-- meanwhile are gone from the set (they were archived first); their records are not returned.
-- KEYS: shard trim. ARGV: shard prefix, score, member, limit.
-- Returns {visited, last score, last member, member, value, member, value, ...}: how many
-- candidates the page went through (the next page starts after the last of them, returned or
-- not), then the committed records among them.
local limit = tonumber(ARGV[4])
local out = {}
local last_score, last_member = '', ''
local function take(m, score)
  last_score, last_member = score, m
  local p, seq = split_member(m)
  local v = redis.call('HGET', ARGV[1] .. 'm:' .. p, seq)
  if committed(v) then
    table.insert(out, m)
    table.insert(out, v)
  end
end
local taken = 0
local from = '-inf'
if ARGV[2] ~= '' then
  -- The rest of the cursor's own score: members after the cursor's.
  for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[2], ARGV[2])) do
    if m > ARGV[3] and taken < limit then
      take(m, ARGV[2])
      taken = taken + 1
    end
  end
  from = '(' .. ARGV[2]
end
if taken < limit then
  local rest = redis.call('ZRANGEBYSCORE', KEYS[1], from, '+inf', 'WITHSCORES', 'LIMIT', 0,
    limit - taken)
  for i = 1, #rest, 2 do
    take(rest[i], rest[i + 1])
    taken = taken + 1
  end
end
table.insert(out, 1, last_member)
table.insert(out, 1, last_score)
table.insert(out, 1, tostring(taken))
return out
