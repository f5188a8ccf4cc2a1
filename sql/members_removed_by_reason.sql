-- Members removed, by reason (session_timeout, leave, rebalance_timeout, ...), per group.
SELECT group_id, reason, count(*) AS removed
FROM group_events
WHERE kind = 'member_removed'
GROUP BY group_id, reason
ORDER BY removed DESC, group_id, reason
