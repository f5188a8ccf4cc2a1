-- The scheduled maintenance job (conf/bundle/resources/maintenance.job.yml). Retention 168 h =
-- Delta's default delta.deletedFileRetentionDuration (docs/engine.md, "Maintenance").
OPTIMIZE decisions;
OPTIMIZE group_events;
OPTIMIZE groups;
OPTIMIZE rejected_events;
OPTIMIZE quota_decisions;
OPTIMIZE throttle_events;
OPTIMIZE query_progress;
VACUUM decisions RETAIN 168 HOURS;
VACUUM group_events RETAIN 168 HOURS;
VACUUM groups RETAIN 168 HOURS;
VACUUM rejected_events RETAIN 168 HOURS;
VACUUM quota_decisions RETAIN 168 HOURS;
VACUUM throttle_events RETAIN 168 HOURS;
VACUUM query_progress RETAIN 168 HOURS;
