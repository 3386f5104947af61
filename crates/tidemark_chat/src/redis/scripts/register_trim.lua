-- Registers a trim candidate for a COMMITTED record that has none, and takes it off the shard's
-- untracked queue (records committed in hot-only mode, now in the outbox).
-- KEYS: messages, shard trim, shard ut. ARGV: P, seq, score.
redis.call('ZREM', KEYS[3], ARGV[1] .. ARGV[2])
if committed(redis.call('HGET', KEYS[1], ARGV[2])) then
  return redis.call('ZADD', KEYS[2], 'NX', ARGV[3], ARGV[1] .. ARGV[2])
end
return 0
