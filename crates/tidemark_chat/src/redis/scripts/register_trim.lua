-- Registers a trim candidate for a COMMITTED record that has none.
-- KEYS: messages, shard trim. ARGV: P, seq, score.
if committed(redis.call('HGET', KEYS[1], ARGV[2])) then
  return redis.call('ZADD', KEYS[2], 'NX', ARGV[3], ARGV[1] .. ARGV[2])
end
return 0
