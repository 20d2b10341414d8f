-- The first log row of the alert that wrote each outbox row: its own alert, which a dispatcher never takes for a
-- later one that overtook the entry it waits to send (a reversal's new side beside its own CLOSE, another alert of
-- the strategy in the same millisecond). Rows stored before this migration, or by an earlier version during a
-- rolling upgrade, have none (NULL): an alert in their own millisecond overtakes them, as before. A nullable
-- column without a default: adding it rewrites no row.
ALTER TABLE outbox ADD COLUMN alert_log_id BIGINT;
