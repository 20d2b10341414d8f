-- When the lease was last taken or renewed, by its holder's clock (Unix ms; 0 when written by an earlier version).
-- A renewal stamped further ahead of a server's clock than the clocks may differ was made under a clock since set
-- back (a run killed while its clock was ahead): such a lease is taken over rather than left to hold the bot, its
-- rows unsent, for the whole step. Told by the renewal, not the expiry, so that a peer whose leases simply last
-- longer (another --lease-ttl-secs) is never taken for one.
ALTER TABLE bot_leases ADD COLUMN renewed_ms BIGINT NOT NULL DEFAULT 0;
