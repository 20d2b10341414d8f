-- Log rows are only ever read per strategy (its `(strategy, id)` index pages them), by time (the block-range
-- index) and pruned by either: the primary key's B-tree served no query, and cost every log row (two an alert)
-- an index insertion. Their ids still come from the sequence, one each, in order.
ALTER TABLE logs DROP CONSTRAINT logs_pkey;
