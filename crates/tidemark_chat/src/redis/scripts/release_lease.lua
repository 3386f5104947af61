-- Gives a shard's lease up if it is still (ARGV[1] holder, ARGV[2] token).
-- KEYS: shard lease.
if fenced(KEYS[1], ARGV[1], ARGV[2], nil) then return 0 end
return redis.call('DEL', KEYS[1])
