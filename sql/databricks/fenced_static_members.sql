SELECT group_id, group_instance_id, member_id, reason, timestamp_millis(at_ms) AS at, event_id
FROM group_events
WHERE kind = 'member_fenced'
ORDER BY at_ms DESC, group_id
