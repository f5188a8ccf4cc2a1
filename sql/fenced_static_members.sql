-- Static members fenced (KIP-345): a newer instance with the same group.instance.id took over,
-- or a zombie with an old member id was refused. One row per fence, newest first.
SELECT group_id, group_instance_id, member_id, reason, to_timestamp_millis(at_ms) AS at, event_id
FROM group_events
WHERE kind = 'member_fenced'
ORDER BY at_ms DESC, group_id
