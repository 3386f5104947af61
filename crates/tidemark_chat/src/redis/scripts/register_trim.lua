-- Registers a trim candidate for a COMMITTED record that has none, and takes it off the shard's
-- untracked queue (records committed in hot-only mode, now in the outbox). Scored as
-- mark_published_and_committed scores: from `now` or the shard's clock floor if later.
-- KEYS: messages, shard trim, shard ut, shard clock floor. ARGV: P, seq, now, hot window.
redis.call('ZREM', KEYS[3], ARGV[1] .. ARGV[2])
if committed(redis.call('HGET', KEYS[1], ARGV[2])) then
  local t = commit_time(KEYS[4], ARGV[3])
  return redis.call('ZADD', KEYS[2], 'NX', string.format('%d', t + tonumber(ARGV[4])),
    ARGV[1] .. ARGV[2])
end
return 0
