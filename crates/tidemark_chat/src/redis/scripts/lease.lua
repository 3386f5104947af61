-- Takes or renews a shard's lease (DESIGN.md "Many nodes": leases with fencing tokens).
-- KEYS: shard lease (hash holder, token; expires), shard fence (counter, never expires).
-- ARGV: holder, ttl ms. Returns the token (a string) if ARGV[1] holds the lease now, false
-- while another holder's lease runs. A new holder's token is one more than the last one given.
local holder = redis.call('HGET', KEYS[1], 'holder')
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return redis.call('HGET', KEYS[1], 'token')
end
if holder then return false end
local token = redis.call('INCR', KEYS[2])
redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'token', token)
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return tostring(token)
