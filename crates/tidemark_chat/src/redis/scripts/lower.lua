-- HSET KEYS[1] ARGV[1] ARGV[2] unless the field already holds a value at most ARGV[2]; returns
-- the field's value afterwards, the smallest ever set (the hot window floor never grows).
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if not cur or tonumber(ARGV[2]) < tonumber(cur) then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return tonumber(ARGV[2])
end
return tonumber(cur)
