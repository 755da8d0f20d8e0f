-- hostpipe's attachment store, version 4: tool calls are audited like reads, and a
-- consent grant may be for a tool call. Same dialect rules as 0001.

-- What a grant allows: 'read' (uri is the resource URI) or 'call' (uri is the tool's
-- name as its server lists it).
ALTER TABLE hostpipe_consent_grants ADD COLUMN kind TEXT NOT NULL DEFAULT 'read';

-- The tool call history: one row per tool call of a turn.
CREATE TABLE hostpipe_tool_calls (
    turn_id       TEXT NOT NULL,     -- UUID v7 of the turn
    seq           BIGINT NOT NULL,   -- position of the call in the turn
    at_ms         BIGINT NOT NULL,   -- when the turn started, Unix ms
    pipeline      TEXT NOT NULL,
    conversation  TEXT,
    message       TEXT,
    server        TEXT NOT NULL,     -- configured MCP server name
    tool          TEXT NOT NULL,     -- the tool's name as the server lists it
    name          TEXT NOT NULL,     -- the name the model saw (server__tool)
    arguments     TEXT NOT NULL,     -- JSON, capped at 4096 bytes
    result_bytes  BIGINT NOT NULL,
    result_tokens BIGINT NOT NULL,
    is_error      BIGINT NOT NULL,   -- 1: the tool reported an error, or the call failed
    error         TEXT,              -- why the call failed or was withheld
    withheld      BIGINT NOT NULL,   -- 1: the pipeline's policy withheld it (never run)
    duration_ms   BIGINT NOT NULL,
    consent       TEXT,              -- the consent decision; NULL: no policy
    origin        TEXT NOT NULL,     -- 'model' | 'api' | 'agent'
    PRIMARY KEY (turn_id, seq)
);

CREATE INDEX hostpipe_tool_calls_at ON hostpipe_tool_calls (at_ms);
CREATE INDEX hostpipe_tool_calls_conversation ON hostpipe_tool_calls (conversation, at_ms);
CREATE INDEX hostpipe_tool_calls_pipeline ON hostpipe_tool_calls (pipeline, at_ms);
