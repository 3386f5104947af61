-- Raises a shard's clock floor to ARGV[1] (Unix ms); it never moves back. Returns the floor.
-- KEYS: shard clock floor
return commit_time(KEYS[1], ARGV[1])
