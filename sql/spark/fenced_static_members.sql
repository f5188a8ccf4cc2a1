-- Static members fenced (KIP-345): a newer instance with the same group.instance.id took over,
-- or a zombie with an old member id was refused. One row per fence, newest first.
-- Spark SQL twin of sql/fenced_static_members.sql (timestamp_millis).
SELECT group_id, group_instance_id, member_id, reason, timestamp_millis(at_ms) AS at, event_id
FROM group_events
WHERE kind = 'member_fenced'
ORDER BY at_ms DESC, group_id
