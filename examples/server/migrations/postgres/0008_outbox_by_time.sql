-- The minute's prune deletes finished outbox rows older than the retention by `created_ms`, which no index
-- covered: each prune read the whole outbox (two rows an alert with two bots, kept for the retention's days).
-- Rows are inserted in about `created_ms` order, so a block-range index (as the logs' `ts_ms` has) finds the
-- old ones for a few pages of index.
CREATE INDEX outbox_by_time ON outbox USING brin (created_ms);
