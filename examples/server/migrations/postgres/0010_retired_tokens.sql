-- Tokens rotated away through the admin API. A strategy file that names one (its id changed after a rotation,
-- or a copy of a rotated strategy's file) is refused: a token rotated away, perhaps because it leaked, must
-- never answer again. Servers read it at start and learn of other servers' rotations from `token_overrides`.
CREATE TABLE retired_tokens (
    token_hash TEXT PRIMARY KEY,
    strategy TEXT NOT NULL,
    retired_ms BIGINT NOT NULL
);
