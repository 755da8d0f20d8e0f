-- hostpipe's attachment store, version 6: OAuth credentials of remote MCP servers,
-- keyed by server and authorization server (issuer). `sealed` is XChaCha20-Poly1305
-- ciphertext (hostpipe_engine::credentials), never a token in plain text; hostpipe
-- writes here only when HOSTPIPE_CREDENTIAL_KEY is set. Same dialect rules as 0001.

CREATE TABLE hostpipe_oauth_credentials (
    server        TEXT NOT NULL,      -- configured MCP server name
    issuer        TEXT NOT NULL,      -- the authorization server's issuer ('' when unknown)
    sealed        TEXT NOT NULL,      -- 'v1.' + base64url(nonce || ciphertext || tag)
    updated_at_ms BIGINT NOT NULL,    -- Unix ms
    PRIMARY KEY (server, issuer)
);
