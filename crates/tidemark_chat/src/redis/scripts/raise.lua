-- HSET KEYS[1] ARGV[1] ARGV[2] if the field exists (ARGV[3] = '1': or not) and its value is
-- lower: read pointers and the archive watermark never move backwards.
local cur = redis.call('HGET', KEYS[1], ARGV[1])
if (cur and tonumber(cur) < tonumber(ARGV[2])) or (not cur and ARGV[3] == '1') then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
  return 1
end
return 0
