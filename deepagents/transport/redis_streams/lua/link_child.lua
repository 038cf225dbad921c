-- Name a child task's parent on the child's task hash (for GET /v1/tasks/{id}, status);
-- only while the hash exists, so a child that already expired is not brought back.
-- KEYS[1] the child's task hash; ARGV[1] parent id, [2] depth
-- Returns 1 when linked, 0 when the child is gone
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'parent_id', ARGV[1], 'depth', ARGV[2])
return 1
