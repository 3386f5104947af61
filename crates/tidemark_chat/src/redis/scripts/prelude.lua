-- Shared by every script (prepended in scripts.rs).
-- A shard-queue member is "<P><suffix>": P = "<len(tenant)>:<tenant><len(cid)>:<cid>" names the
-- conversation, the suffix is a seq (rsv, trim) or a dedup field (dx). Returns P, suffix.
local function split_member(member)
  local a = string.find(member, ':', 1, true)
  local p2 = a + tonumber(string.sub(member, 1, a - 1)) + 1
  local b = string.find(member, ':', p2, true)
  local pend = b + tonumber(string.sub(member, p2, b - 1))
  return string.sub(member, 1, pend), string.sub(member, pend + 1)
end
-- A record value is "<state><expiry digits>|<json>": state 'R' (RESERVED) or 'C' (COMMITTED),
-- expiry empty for standard messages.
local function expired(v, now)
  local e = string.match(v, '^.(%d*)|')
  return e ~= '' and tonumber(e) <= now
end
local function committed(v)
  return v and string.sub(v, 1, 1) == 'C'
end
-- The hot history index of a conversation is a bitmap: bit s is set while seq s is committed and
-- hot. The first indexed seq in [from, to] (to clamped by the caller) whose record in `messages`
-- is committed and unexpired at `now`, with that record's value; nil if there is none.
local function next_visible(index, messages, from, to, now)
  while from <= to do
    local s = redis.call('BITPOS', index, 1, from, to, 'BIT')
    if s < 0 then return nil end
    local v = redis.call('HGET', messages, s)
    if committed(v) and not expired(v, now) then return s, v end
    from = s + 1
  end
  return nil
end
-- How many seqs of [from, to] have a record in `messages`, in any state, expired ones too (the
-- reader's check for a lost hot record: seqs above F are dense).
local function held(messages, from, to)
  local n = 0
  for s = from, to do n = n + redis.call('HEXISTS', messages, s) end
  return n
end
-- The commit time of a mark on a shard: `now` (a string of Unix ms) or the shard's clock floor
-- if that is later; raises the floor to it (HotStore::raise_clock_floor). Returns it.
local function commit_time(floor_key, now)
  local floor = tonumber(redis.call('GET', floor_key) or '0')
  local t = tonumber(now)
  if t > floor then
    redis.call('SET', floor_key, now)
    return t
  end
  return floor
end
-- Whether a fenced step must not run: the shard's lease (KEYS lease) is not (holder, token) —
-- expired, or another's. If it is and `ttl` is given, the step renews it.
local function fenced(lease_key, holder, token, ttl)
  local h = redis.call('HMGET', lease_key, 'holder', 'token')
  if h[1] ~= holder or h[2] ~= token then return true end
  if ttl then redis.call('PEXPIRE', lease_key, ttl) end
  return false
end
