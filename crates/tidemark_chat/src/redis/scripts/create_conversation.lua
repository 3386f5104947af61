-- Creates the conversation hash KEYS[1] with the field/value pairs of ARGV (the first pair is
-- "members", its JSON list) unless it exists. Returns {1, members} if it was created, {0, the
-- stored members} if it existed: that one is left as it is (a retry must not reset its latest
-- seq or floor, nor change its members).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return {0, redis.call('HGET', KEYS[1], 'members')}
end
redis.call('HSET', KEYS[1], unpack(ARGV))
return {1, ARGV[2]}
