-- hostpipe's attachment store, version 2: consent grants ("allow for this conversation"),
-- kept so that every worker sharing the store honours them. Same dialect rules as 0001.

CREATE TABLE hostpipe_consent_grants (
    grant_key     TEXT PRIMARY KEY,   -- XXH3-128 of (pipeline, conversation, server, uri,
                                      -- origin), each length-prefixed: any URI length fits
    pipeline      TEXT NOT NULL,      -- the pipeline whose consent policy asked
    conversation  TEXT NOT NULL,
    server        TEXT NOT NULL,      -- configured MCP server name
    uri           TEXT NOT NULL,      -- the resource URI
    origin        TEXT NOT NULL,      -- 'host' | 'model'
    granted_at_ms BIGINT NOT NULL     -- Unix ms
);

CREATE INDEX hostpipe_consent_grants_conversation ON hostpipe_consent_grants (conversation);
