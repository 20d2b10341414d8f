-- A claim is a unique-key insert checked for a conflict first: two descents of the keys' B-tree per alert. Its
-- key was (strategy, key hex), about a hundred bytes of text compared field by field; it is now the first 16
-- bytes of SHA-256 over both, compared as one fixed-size value, in an index a fifth of the size. The strategy and
-- key stay in the row, for reading. 128 bits of SHA-256 make a collision between two keys of a window as likely
-- as guessing a random 128-bit number. The servers compute the digest themselves (`tables::digest`): the strategy's
-- length in decimal, a colon, the strategy, the key, as UTF-8; this is the same for the keys already claimed.
ALTER TABLE dedup_keys ADD COLUMN digest UUID;
UPDATE dedup_keys
    SET digest = encode(substr(sha256(convert_to(length(strategy)::TEXT || ':' || strategy || key, 'UTF8')), 1, 16),
                        'hex')::UUID;
ALTER TABLE dedup_keys ALTER COLUMN digest SET NOT NULL;
ALTER TABLE dedup_keys DROP CONSTRAINT dedup_keys_pkey;
ALTER TABLE dedup_keys ADD PRIMARY KEY (digest);
