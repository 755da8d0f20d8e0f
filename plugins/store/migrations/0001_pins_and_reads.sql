-- hostpipe's attachment store, version 1. One file for SQLite and PostgreSQL: only
-- types and statements both accept (TEXT, BIGINT, 0/1 for booleans).

-- Pins: resources attached to every turn of a pipeline or of a conversation.
CREATE TABLE hostpipe_pins (
    id            TEXT PRIMARY KEY,   -- UUID v7
    pin_key       TEXT NOT NULL UNIQUE, -- XXH3-128 of (scope, owner, server, kind, target,
                                      -- arguments): one pin per target and owner, whatever
                                      -- the values' length (a B-tree entry has a size limit)
    scope         TEXT NOT NULL,      -- 'pipeline' | 'conversation'
    owner         TEXT NOT NULL,      -- the pipeline or conversation id
    server        TEXT NOT NULL,      -- configured MCP server name
    kind          TEXT NOT NULL,      -- 'uri' | 'template'
    target        TEXT NOT NULL,      -- the URI, or the RFC 6570 URI template
    arguments     TEXT NOT NULL,      -- template arguments as a JSON object ('{}' for a URI)
    created_at_ms BIGINT NOT NULL,    -- Unix ms
    expires_at_ms BIGINT              -- Unix ms; NULL: until removed
);

CREATE INDEX hostpipe_pins_owner ON hostpipe_pins (scope, owner);

-- The read history: one row per resource read of a turn.
CREATE TABLE hostpipe_reads (
    turn_id          TEXT NOT NULL,   -- UUID v7 of the turn
    seq              BIGINT NOT NULL, -- position of the read in the turn
    at_ms            BIGINT NOT NULL, -- when the turn started, Unix ms
    pipeline         TEXT NOT NULL,
    conversation     TEXT,
    message          TEXT,
    server           TEXT NOT NULL,
    uri              TEXT NOT NULL,
    mime_type        TEXT,
    scope            TEXT NOT NULL,   -- 'pipeline' | 'conversation' | 'message'
    bytes            BIGINT NOT NULL, -- content bytes received
    tokens_before    BIGINT NOT NULL,
    tokens_estimated BIGINT NOT NULL, -- 1: tokens_before is an estimate
    tokens_after     BIGINT NOT NULL,
    treatment        TEXT NOT NULL,   -- JSON, e.g. {"kind":"chunked","kept":3,"total":9}
    duration_ms      BIGINT NOT NULL,
    cache_hit        BIGINT NOT NULL, -- 1: served from hostpipe's content cache
    error            TEXT,            -- NULL: the read succeeded
    origin           TEXT NOT NULL,   -- 'host' (an attachment) | 'model' (read_resource)
    consent          TEXT,            -- the consent decision; NULL: the pipeline has no policy
    PRIMARY KEY (turn_id, seq)
);

CREATE INDEX hostpipe_reads_at ON hostpipe_reads (at_ms);
CREATE INDEX hostpipe_reads_conversation ON hostpipe_reads (conversation, at_ms);
CREATE INDEX hostpipe_reads_pipeline ON hostpipe_reads (pipeline, at_ms);
