-- How long JoinGroup requests waited for their answer (parked until the rebalance completed),
-- per group: decided_at_ms - event_time_ms of successful joins.
SELECT group_id,
       count(*) AS joins,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY decided_at_ms - event_time_ms) AS p50_wait_ms,
       percentile_cont(0.99) WITHIN GROUP (ORDER BY decided_at_ms - event_time_ms) AS p99_wait_ms,
       max(decided_at_ms - event_time_ms) AS max_wait_ms
FROM decisions
WHERE type = 'join' AND error_code = 0 AND event_time_ms IS NOT NULL
GROUP BY group_id
ORDER BY p99_wait_ms DESC, group_id
