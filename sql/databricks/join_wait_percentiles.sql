SELECT group_id,
       count(*) AS joins,
       percentile_approx(decided_at_ms - event_time_ms, 0.5) AS p50_wait_ms,
       percentile_approx(decided_at_ms - event_time_ms, 0.99) AS p99_wait_ms,
       max(decided_at_ms - event_time_ms) AS max_wait_ms
FROM decisions
WHERE type = 'join' AND error_code = 0 AND event_time_ms IS NOT NULL
GROUP BY group_id
ORDER BY p99_wait_ms DESC, group_id
