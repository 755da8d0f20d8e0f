-- hostpipe's attachment store, version 5: what became of each read, as a value rather
-- than the text of its error. Same dialect rules as 0001.

-- 'read' | 'withheld' | 'not_read' | 'failed' (hostpipe_core::ReadOutcome).
ALTER TABLE hostpipe_reads ADD COLUMN outcome TEXT NOT NULL DEFAULT 'read';

-- Reads recorded before this version: the outcome their error text tells. A conversion
-- that failed was written like a refusal ("… refused: …") and counts as withheld; an
-- attachment whose template could not be filled in counts as failed.
UPDATE hostpipe_reads SET outcome = CASE
    WHEN error IS NULL THEN 'read'
    WHEN error LIKE 'withheld%' THEN 'withheld'
    WHEN error LIKE 'not read:%' THEN 'not_read'
    WHEN error LIKE 'server `%` is not bound for this turn%' THEN 'not_read'
    WHEN error LIKE 'refused (%' OR error LIKE '% refused: %' THEN 'withheld'
    ELSE 'failed'
END;
