-- A batch counts all its alerts of one strategy at one instant: one mark per strategy and batch, with how many
-- deliveries it counts, instead of one row (and one index entry) per delivery. Existing rows count one each.
ALTER TABLE rate_marks ADD COLUMN n BIGINT NOT NULL DEFAULT 1;
