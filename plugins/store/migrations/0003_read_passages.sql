-- hostpipe's attachment store, version 3: what the ranking kept of each read. Same
-- dialect rules as 0001.

-- The kept passages as a JSON array of {rank, score, first_line, last_line, heading,
-- cut}; NULL when the read was not ranked in passages.
ALTER TABLE hostpipe_reads ADD COLUMN passages TEXT;
-- Why the resource was left out or only partly kept; NULL when it went in whole or the
-- read failed (see `error`).
ALTER TABLE hostpipe_reads ADD COLUMN reason TEXT;
